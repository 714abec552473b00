//! Finding OpenCL devices: every platform's devices in one numbered list
//! (what `--device N` and `mllm devices` count), their extensions and
//! memory, and the errors that say what to install when there are none.
//! The OpenCL library is loaded at run time (opencl3's `dynamic` feature),
//! so a binary built here starts on machines without it.

use opencl3::device::{Device, CL_DEVICE_TYPE_ALL};
use opencl3::platform::get_platforms;

use crate::error::BackendError;

/// What to do when no device is found.
pub const INSTALL_HINT: &str = "install an OpenCL ICD loader and a driver: on Debian/Ubuntu `apt install ocl-icd-libopencl1 pocl-opencl-icd` gives a CPU device; a GPU needs its vendor's OpenCL driver";

#[derive(Clone)]
pub struct DeviceInfo {
    /// Position in the list of all platforms' devices.
    pub index: usize,
    pub device: Device,
    pub name: String,
    pub platform: String,
    pub version: String,
    pub extensions: String,
    pub global_mem: u64,
    pub max_alloc: u64,
    pub compute_units: u32,
    pub max_work_group: usize,
    /// `cl_khr_fp16`: half arithmetic in kernels (otherwise f16 data is
    /// only loaded and stored, `vload_half`, and computed in f32).
    pub fp16: bool,
}

pub fn cl_err(what: &'static str, code: impl std::fmt::Display) -> BackendError {
    BackendError::Invalid {
        op: "opencl",
        msg: format!("{what}: OpenCL error {code}"),
    }
}

fn none(msg: String) -> BackendError {
    BackendError::Invalid { op: "opencl", msg }
}

/// Every device of every platform, numbered.
pub fn list() -> Result<Vec<DeviceInfo>, BackendError> {
    let platforms = get_platforms().map_err(|e| {
        none(format!(
            "the OpenCL library could not be loaded or lists no platform ({e}); {INSTALL_HINT}"
        ))
    })?;
    let mut out = vec![];
    for p in platforms {
        let ids = p.get_devices(CL_DEVICE_TYPE_ALL).unwrap_or_default();
        let pname = p.name().unwrap_or_default();
        for id in ids {
            let d = Device::new(id);
            let extensions = d.extensions().unwrap_or_default();
            out.push(DeviceInfo {
                index: out.len(),
                name: d.name().unwrap_or_default().trim().to_string(),
                platform: pname.trim().to_string(),
                version: d.version().unwrap_or_default().trim().to_string(),
                fp16: extensions.split_whitespace().any(|e| e == "cl_khr_fp16"),
                extensions,
                global_mem: d.global_mem_size().unwrap_or(0),
                max_alloc: d.max_mem_alloc_size().unwrap_or(0),
                compute_units: d.max_compute_units().unwrap_or(0),
                max_work_group: d.max_work_group_size().unwrap_or(1),
                device: d,
            });
        }
    }
    if out.is_empty() {
        return Err(none(format!("no OpenCL device found; {INSTALL_HINT}")));
    }
    Ok(out)
}

/// Device `n` of `list()`.
pub fn pick(n: usize) -> Result<DeviceInfo, BackendError> {
    let all = list()?;
    let count = all.len();
    all.into_iter().nth(n).ok_or_else(|| {
        none(format!(
            "there is no OpenCL device {n}: this machine has {count} (see `mllm devices`)"
        ))
    })
}
