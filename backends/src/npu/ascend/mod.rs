//! Huawei AscendCL runtime (the `ascend` feature): loads `.om` models made
//! by `atc` and runs them on an Ascend NPU. The C API is bindgen's from
//! `$ASCEND_TOOLKIT_HOME/include/acl` (build.rs) as a table of symbols of
//! `libascendcl.so`, opened at run time (`MLLM_ASCEND_LIB` overrides the
//! name). `AclRuntime` is aclInit + aclrtSetDevice for the process (undone
//! when the last model is dropped); each `AclModel` is one `.om` with a
//! device buffer per input and output, matched by name to io.json's ports,
//! and implements `StaticGraph`: host data converted and copied in,
//! `aclmdlExecute`, outputs copied back.
//!
//! Type-checked against the CANN headers only; never run on a device
//! (docs/npu_runtime.md).

use std::ffi::{c_void, CStr, CString};
use std::path::Path;
use std::ptr;
use std::rc::Rc;

use super::convert::{decode, encode, Wire};
use super::{npu_err, output_buffer, HostData, NpuError, NpuResult, PortSpec, StaticGraph};

#[allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    dead_code,
    clippy::all
)]
mod ffi {
    include!(concat!(env!("OUT_DIR"), "/acl_bindings.rs"));
}

/// The library opened when `MLLM_ASCEND_LIB` is unset.
pub const DEFAULT_LIB: &str = "libascendcl.so";

/// AscendCL initialised on one device, for the process.
pub struct AclRuntime {
    lib: ffi::AclLib,
    /// Whether aclInit succeeded, and the device set (-1: none).
    init: bool,
    device: i32,
}

impl AclRuntime {
    fn check(&self, what: &str, code: ffi::aclError) -> NpuResult<()> {
        if code == ffi::ACL_SUCCESS {
            return Ok(());
        }
        // SAFETY: a C string owned by the library, or null.
        let msg = unsafe {
            let p = (self.lib.aclGetRecentErrMsg)();
            if p.is_null() {
                String::new()
            } else {
                format!(": {}", CStr::from_ptr(p).to_string_lossy())
            }
        };
        npu_err(format!("AscendCL {what} failed with error {code}{msg}"))
    }

    /// Opens libascendcl, initialises it and selects device `device`.
    pub fn new(device: usize) -> NpuResult<Rc<AclRuntime>> {
        let name = std::env::var("MLLM_ASCEND_LIB").unwrap_or_else(|_| DEFAULT_LIB.to_string());
        // SAFETY: loading the vendor library runs its initialisers.
        let lib = unsafe { ffi::AclLib::new(&name) }.map_err(|e| {
            NpuError(format!(
                "cannot load {name} ({e}): source the CANN toolkit's set_env.sh (LD_LIBRARY_PATH), or set MLLM_ASCEND_LIB to the library's path"
            ))
        })?;
        let device = i32::try_from(device).map_err(|e| NpuError(e.to_string()))?;
        let mut rt = AclRuntime {
            lib,
            init: false,
            device: -1,
        };
        rt.check("aclInit", unsafe { (rt.lib.aclInit)(ptr::null()) })?;
        rt.init = true;
        rt.check(&format!("aclrtSetDevice({device})"), unsafe {
            (rt.lib.aclrtSetDevice)(device)
        })?;
        rt.device = device;
        Ok(Rc::new(rt))
    }
}

impl Drop for AclRuntime {
    fn drop(&mut self) {
        // SAFETY: undoes `new`; every model (holding an Rc) is gone.
        unsafe {
            if self.device >= 0 {
                (self.lib.aclrtResetDevice)(self.device);
            }
            if self.init {
                (self.lib.aclFinalize)();
            }
        }
    }
}

fn wire_of(t: ffi::aclDataType, name: &str) -> NpuResult<Wire> {
    match t {
        ffi::ACL_FLOAT => Ok(Wire::F32),
        ffi::ACL_FLOAT16 => Ok(Wire::F16),
        ffi::ACL_INT32 => Ok(Wire::I32),
        ffi::ACL_INT64 => Ok(Wire::I64),
        ffi::ACL_UINT32 => Ok(Wire::U32),
        other => npu_err(format!(
            "tensor `{name}` has ACL data type {other}, which this runtime cannot feed"
        )),
    }
}

/// One model input or output: its device buffer and the host staging bytes.
struct Io {
    name: String,
    port: Option<PortSpec>,
    wire: Wire,
    dev: *mut c_void,
    size: usize,
    host: Vec<u8>,
}

/// An `.om` model loaded on the runtime's device.
pub struct AclModel {
    rt: Rc<AclRuntime>,
    id: u32,
    desc: *mut ffi::aclmdlDesc,
    path: String,
    inputs: Vec<Io>,
    outputs: Vec<Io>,
    /// Datasets over the device buffers, made once (null until then).
    in_ds: *mut ffi::aclmdlDataset,
    out_ds: *mut ffi::aclmdlDataset,
    /// Every data buffer of the datasets, destroyed with them.
    bufs: Vec<*mut ffi::aclDataBuffer>,
}

/// ATC may name an output `node:index:name`; the last part is ours.
fn port_for(name: &str, ports: &[PortSpec]) -> Option<PortSpec> {
    let short = name.rsplit(':').next().unwrap_or(name);
    ports
        .iter()
        .find(|p| p.name == name || p.name == short)
        .cloned()
}

impl AclModel {
    /// Loads `om` and binds its I/O to io.json's `inputs` and `outputs`.
    pub fn load(
        rt: &Rc<AclRuntime>,
        om: &Path,
        inputs: &[PortSpec],
        outputs: &[PortSpec],
    ) -> NpuResult<AclModel> {
        let path = om.display().to_string();
        let c_path = CString::new(path.as_str()).map_err(|e| NpuError(e.to_string()))?;
        let lib = &rt.lib;
        let mut id = 0u32;
        rt.check(&format!("aclmdlLoadFromFile({path})"), unsafe {
            (lib.aclmdlLoadFromFile)(c_path.as_ptr(), &mut id)
        })?;
        let desc = unsafe { (lib.aclmdlCreateDesc)() };
        let mut m = AclModel {
            rt: rt.clone(),
            id,
            desc,
            path: path.clone(),
            inputs: vec![],
            outputs: vec![],
            in_ds: ptr::null_mut(),
            out_ds: ptr::null_mut(),
            bufs: vec![],
        };
        if desc.is_null() {
            return npu_err("aclmdlCreateDesc returned null");
        }
        rt.check("aclmdlGetDesc", unsafe { (lib.aclmdlGetDesc)(desc, id) })?;
        for out in [false, true] {
            let (n, ports) = if out {
                (unsafe { (lib.aclmdlGetNumOutputs)(desc) }, outputs)
            } else {
                (unsafe { (lib.aclmdlGetNumInputs)(desc) }, inputs)
            };
            for i in 0..n {
                // SAFETY: index below the model's count; names owned by desc.
                let (name, dtype, size) = unsafe {
                    let (p, t, s) = if out {
                        (
                            (lib.aclmdlGetOutputNameByIndex)(desc, i),
                            (lib.aclmdlGetOutputDataType)(desc, i),
                            (lib.aclmdlGetOutputSizeByIndex)(desc, i),
                        )
                    } else {
                        (
                            (lib.aclmdlGetInputNameByIndex)(desc, i),
                            (lib.aclmdlGetInputDataType)(desc, i),
                            (lib.aclmdlGetInputSizeByIndex)(desc, i),
                        )
                    };
                    let name = if p.is_null() {
                        String::new()
                    } else {
                        CStr::from_ptr(p).to_string_lossy().into_owned()
                    };
                    (name, t, s)
                };
                let wire = wire_of(dtype, &name)?;
                // ATC keeps ONNX's order: match by position when names differ.
                let port = port_for(&name, ports).or_else(|| ports.get(i).cloned());
                if let Some(p) = &port {
                    if p.numel() * wire.bytes() != size {
                        return npu_err(format!(
                            "{path}: `{name}` holds {size} bytes; io.json's `{}` is {} {:?} ({} bytes as {wire:?})",
                            p.name,
                            p.dtype.name(),
                            p.shape,
                            p.numel() * wire.bytes()
                        ));
                    }
                }
                let mut dev: *mut c_void = ptr::null_mut();
                rt.check(&format!("aclrtMalloc of {size} bytes"), unsafe {
                    (lib.aclrtMalloc)(&mut dev, size, ffi::ACL_MEM_MALLOC_HUGE_FIRST)
                })?;
                let io = Io {
                    name,
                    port,
                    wire,
                    dev,
                    size,
                    host: Vec::with_capacity(size),
                };
                if out {
                    m.outputs.push(io);
                } else {
                    m.inputs.push(io);
                }
            }
        }
        if let Some(io) = m.inputs.iter().find(|io| io.port.is_none()) {
            return npu_err(format!(
                "{path} takes `{}`, which io.json does not list",
                io.name
            ));
        }
        if let Some(p) = inputs
            .iter()
            .find(|p| !m.inputs.iter().any(|io| io.port.as_ref() == Some(p)))
        {
            return npu_err(format!("{path} has no input for io.json's `{}`", p.name));
        }
        m.in_ds = m.dataset(false)?;
        m.out_ds = m.dataset(true)?;
        Ok(m)
    }

    /// A dataset over the device buffers of the outputs (`out`) or inputs.
    fn dataset(&mut self, out: bool) -> NpuResult<*mut ffi::aclmdlDataset> {
        let rt = self.rt.clone();
        let lib = &rt.lib;
        let ds = unsafe { (lib.aclmdlCreateDataset)() };
        if ds.is_null() {
            return npu_err("aclmdlCreateDataset returned null");
        }
        // Stored at once so that Drop frees it whatever fails below.
        if out {
            self.out_ds = ds;
        } else {
            self.in_ds = ds;
        }
        let ios = if out { &self.outputs } else { &self.inputs };
        for io in ios {
            let buf = unsafe { (lib.aclCreateDataBuffer)(io.dev, io.size) };
            if buf.is_null() {
                return npu_err("aclCreateDataBuffer returned null");
            }
            self.bufs.push(buf);
            rt.check("aclmdlAddDatasetBuffer", unsafe {
                (lib.aclmdlAddDatasetBuffer)(ds, buf)
            })?;
        }
        Ok(ds)
    }
}

impl Drop for AclModel {
    fn drop(&mut self) {
        let lib = &self.rt.lib;
        // SAFETY: resources made in `load`, freed once.
        unsafe {
            for ds in [self.in_ds, self.out_ds] {
                if !ds.is_null() {
                    (lib.aclmdlDestroyDataset)(ds);
                }
            }
            for &b in &self.bufs {
                (lib.aclDestroyDataBuffer)(b);
            }
            for io in self.inputs.iter().chain(&self.outputs) {
                (lib.aclrtFree)(io.dev);
            }
            (lib.aclmdlUnload)(self.id);
            if !self.desc.is_null() {
                (lib.aclmdlDestroyDesc)(self.desc);
            }
        }
    }
}

impl StaticGraph for AclModel {
    fn label(&self) -> String {
        format!("Ascend model {}", self.path)
    }

    fn run(
        &mut self,
        inputs: &[(&str, HostData)],
        outputs: &mut [(&str, &mut [f32])],
    ) -> NpuResult<()> {
        let label = self.label();
        let rt = self.rt.clone();
        let lib = &rt.lib;
        for io in &mut self.inputs {
            let Some(port) = &io.port else { continue };
            let Some((_, data)) = inputs.iter().find(|(n, _)| *n == port.name) else {
                return npu_err(format!("{label}: input `{}` was not given", port.name));
            };
            if data.dtype() != port.dtype || data.len() != port.numel() {
                return npu_err(format!(
                    "{label}: input `{}` is {} x {}; the model takes {} {:?}",
                    port.name,
                    data.dtype().name(),
                    data.len(),
                    port.dtype.name(),
                    port.shape
                ));
            }
            io.host.clear();
            encode(*data, io.wire, &mut io.host)?;
            rt.check("aclrtMemcpy (host to device)", unsafe {
                (lib.aclrtMemcpy)(
                    io.dev,
                    io.size,
                    io.host.as_ptr().cast(),
                    io.host.len(),
                    ffi::ACL_MEMCPY_HOST_TO_DEVICE,
                )
            })?;
        }
        // SAFETY: the datasets point at device buffers of the sizes the
        // model declared, alive as long as `self`.
        let r = unsafe { (lib.aclmdlExecute)(self.id, self.in_ds, self.out_ds) };
        rt.check(&format!("aclmdlExecute of {}", self.path), r)?;
        for io in &mut self.outputs {
            let Some(port) = &io.port else { continue };
            let Some(buf) = output_buffer(outputs, port, &label)? else {
                continue;
            };
            io.host.resize(io.size, 0);
            rt.check("aclrtMemcpy (device to host)", unsafe {
                (lib.aclrtMemcpy)(
                    io.host.as_mut_ptr().cast(),
                    io.size,
                    io.dev,
                    io.size,
                    ffi::ACL_MEMCPY_DEVICE_TO_HOST,
                )
            })?;
            decode(&io.host, io.wire, buf)?;
        }
        Ok(())
    }
}
