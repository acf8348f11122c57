# Geometer: one image for the controller and the node agent.
#
# Not fully static on purpose: the agent loads libnvidia-ml.so.1 from the host driver at run time
# (dlopen), which needs glibc's dynamic loader. Everything else (HiGHS, libstdc++) is linked in,
# so the final image only needs glibc: distroless/cc.
#
# Build:  docker build -t geometer:dev .
FROM rust:1-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends cmake clang libclang-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
ENV RUSTFLAGS="-C link-arg=-static-libstdc++ -C link-arg=-static-libgcc"
RUN cargo build --release --locked --bin geometer \
 && cp target/release/geometer /geometer

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /geometer /usr/local/bin/geometer
# Installed a second time under the kubectl plugin name: `kubectl geometer plan`.
COPY --from=build /geometer /usr/local/bin/kubectl-geometer
# The controller runs as this non-root user. The agent's DaemonSet overrides it with root,
# because creating and destroying MIG instances through NVML needs it (see deploy/).
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/geometer"]
