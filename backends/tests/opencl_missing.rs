//! Without any OpenCL platform the backend is a clear error naming what to
//! install, never a crash. (Its own test binary: the ICD loader reads its
//! environment once per process.)

#![cfg(feature = "opencl")]

#[test]
fn no_platform_is_an_error_that_says_what_to_install() {
    let empty = std::env::temp_dir().join("mllm-no-opencl-vendors");
    std::fs::create_dir_all(&empty).expect("dir");
    std::env::set_var("OCL_ICD_VENDORS", &empty);
    let err = match mllm_backends::opencl::OpenClBackend::new(0) {
        Ok(_) => panic!("a device was found with no ICD vendors"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("apt install ocl-icd-libopencl1 pocl-opencl-icd"),
        "{err}"
    );
}
