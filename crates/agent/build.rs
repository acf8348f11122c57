//! Compiles the kubelet PodResources v1 protocol with protox (pure Rust: no protoc needed).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/podresources/v1/api.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        // The server side is what tests (and the simulated kubelet) serve on a unix socket.
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
