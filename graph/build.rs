//! Compiles ONNX's own `onnx.proto` (vendored in `proto/`, from the onnx
//! 1.17.0 PyPI wheel) into prost message types for the ONNX exporter.
//! protox parses the file in Rust, so no `protoc` binary is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/onnx.proto";
    println!("cargo:rerun-if-changed={proto}");
    let fds = protox::compile([proto], ["proto"])?;
    prost_build::Config::new().compile_fds(fds)?;
    Ok(())
}
