# Geometer: one image for the controller and the node agent.
#
# Not static on purpose: the agent loads libnvidia-ml.so.1 from the host driver at run time
# (dlopen, through the NVIDIA container runtime), which needs glibc's dynamic loader. HiGHS (C++)
# is compiled in statically; the binary then needs glibc, libstdc++ and libgcc_s, which is
# exactly what distroless/cc ships.
#
# Build (from the repository root):  docker build -t geometer:dev .
FROM rust:1-bookworm AS build
# cmake builds HiGHS; libclang is what highs-sys' bindgen needs. protoc is not needed (the
# kubelet PodResources protos are compiled by protox, in Rust).
RUN apt-get update \
 && apt-get install -y --no-install-recommends cmake clang libclang-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The operator only: no in-memory API server, simulated cluster, simulated NVML or fault
# injection (the `demo` feature is for developers).
RUN cargo build --release --locked -p geometer --no-default-features --features highs \
 && cp target/release/geometer /geometer

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /geometer /usr/local/bin/geometer
# Installed a second time under the kubectl plugin name: `kubectl geometer plan`.
COPY --from=build /geometer /usr/local/bin/kubectl-geometer
# The controller runs as this non-root user. The agent's DaemonSet overrides it with root,
# because creating and destroying MIG instances through NVML needs it (see deploy/).
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/geometer"]
