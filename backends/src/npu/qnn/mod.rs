//! Qualcomm QNN runtime (the `qnn` feature): loads a context binary made by
//! `qnn-context-binary-generator` and runs its graphs on the HTP. The C API
//! types are bindgen's from `$QNN_SDK_ROOT/include/QNN` (build.rs); the
//! libraries are opened at run time: `libQnnSystem.so` reads the binary's
//! graph and tensor metadata, `libQnnHtp.so` (or `MLLM_QNN_BACKEND_LIB`)
//! gives the interface table through `QnnInterface_getProviders`, and a
//! backend, device and context are created from the binary. `graph.rs`
//! binds a graph's tensors to host buffers and implements `StaticGraph`.
//!
//! Type-checked against the QNN 2.13 headers only; never run on a device
//! (docs/npu_runtime.md).

mod graph;

use std::ffi::{CStr, CString};
use std::path::Path;
use std::ptr;
use std::rc::Rc;

use libloading::Library;

pub use graph::QnnGraph;

use super::{npu_err, NpuError, NpuResult};

#[allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    dead_code,
    clippy::all
)]
mod ffi {
    include!(concat!(env!("OUT_DIR"), "/qnn_bindings.rs"));
}

/// The backend library opened when `MLLM_QNN_BACKEND_LIB` is unset.
pub const DEFAULT_BACKEND_LIB: &str = "libQnnHtp.so";
/// The system library (context binary metadata), `MLLM_QNN_SYSTEM_LIB` to override.
pub const DEFAULT_SYSTEM_LIB: &str = "libQnnSystem.so";

type GetProviders =
    unsafe extern "C" fn(*mut *mut *const ffi::QnnInterface_t, *mut u32) -> ffi::Qnn_ErrorHandle_t;
type GetSystemProviders = unsafe extern "C" fn(
    *mut *mut *const ffi::QnnSystemInterface_t,
    *mut u32,
) -> ffi::Qnn_ErrorHandle_t;

/// `Ok` for QNN_SUCCESS, else a message naming the call and the code.
fn check(what: &str, e: ffi::Qnn_ErrorHandle_t) -> NpuResult<()> {
    if e == ffi::QNN_SUCCESS as ffi::Qnn_ErrorHandle_t {
        return Ok(());
    }
    npu_err(format!(
        "QNN {what} failed with error {} (0x{:x})",
        e & 0xffff,
        e
    ))
}

fn lib_name(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.to_string())
}

fn open_lib(name: &str, var: &str) -> NpuResult<Library> {
    // SAFETY: loading a vendor library runs its initialisers; that is the
    // contract of using the SDK at all.
    unsafe { Library::new(name) }.map_err(|e| {
        NpuError(format!(
            "cannot load {name} ({e}): install the QNN SDK's runtime libraries where the loader finds them (LD_LIBRARY_PATH), or set {var} to the library's path"
        ))
    })
}

/// Metadata of one tensor of a graph in the binary, owned by us.
#[derive(Clone, Debug)]
pub(crate) struct TensorInfo {
    pub name: String,
    pub id: u32,
    pub data_type: ffi::Qnn_DataType_t,
    pub data_format: ffi::Qnn_TensorDataFormat_t,
    pub tensor_type: ffi::Qnn_TensorType_t,
    /// (scale, offset) of a scale-offset quantized tensor.
    pub scale_offset: Option<(f32, i32)>,
    /// A quantization this runtime cannot feed (per-axis, bit-width).
    pub other_encoding: bool,
    pub dims: Vec<u32>,
}

#[derive(Clone, Debug)]
pub(crate) struct GraphInfo {
    pub name: String,
    pub inputs: Vec<TensorInfo>,
    pub outputs: Vec<TensorInfo>,
}

/// # Safety
/// `t` must point to a valid tensor of the system library's binary info.
unsafe fn tensor_info(t: &ffi::Qnn_Tensor_t) -> NpuResult<TensorInfo> {
    if t.version != ffi::QNN_TENSOR_VERSION_1 {
        return npu_err(format!(
            "a tensor of version {} in the context binary; this build reads version 1 (rebuild against your SDK's headers)",
            t.version
        ));
    }
    let v = &t.__bindgen_anon_1.v1;
    let name = if v.name.is_null() {
        String::new()
    } else {
        CStr::from_ptr(v.name).to_string_lossy().into_owned()
    };
    let dims = if v.dimensions.is_null() {
        vec![]
    } else {
        std::slice::from_raw_parts(v.dimensions, v.rank as usize).to_vec()
    };
    let q = &v.quantizeParams;
    let defined = q.encodingDefinition == ffi::QNN_DEFINITION_DEFINED;
    let scale_offset = (defined
        && q.quantizationEncoding == ffi::QNN_QUANTIZATION_ENCODING_SCALE_OFFSET)
        .then(|| {
            let so = q.__bindgen_anon_1.scaleOffsetEncoding;
            (so.scale, so.offset)
        });
    Ok(TensorInfo {
        name,
        id: v.id,
        data_type: v.dataType,
        data_format: v.dataFormat,
        tensor_type: v.type_,
        other_encoding: defined && scale_offset.is_none(),
        scale_offset,
        dims,
    })
}

/// The graphs a context binary holds, read with libQnnSystem.
fn binary_graphs(binary: &mut [u8]) -> NpuResult<Vec<GraphInfo>> {
    let name = lib_name("MLLM_QNN_SYSTEM_LIB", DEFAULT_SYSTEM_LIB);
    let lib = open_lib(&name, "MLLM_QNN_SYSTEM_LIB")?;
    // SAFETY: the symbol's type is the header's QnnSystemInterface_getProviders.
    let get: libloading::Symbol<GetSystemProviders> =
        unsafe { lib.get(b"QnnSystemInterface_getProviders\0") }
            .map_err(|e| NpuError(format!("{name} is not a QNN system library: {e}")))?;
    let mut list: *mut *const ffi::QnnSystemInterface_t = ptr::null_mut();
    let mut n = 0u32;
    check("QnnSystemInterface_getProviders", unsafe {
        get(&mut list, &mut n)
    })?;
    // SAFETY: the library returned `n` provider pointers.
    let providers = unsafe { std::slice::from_raw_parts(list, n as usize) };
    let Some(sys) = providers
        .iter()
        .filter_map(|p| unsafe { p.as_ref() })
        .find(|p| p.systemApiVersion.major == ffi::QNN_SYSTEM_API_VERSION_MAJOR)
    else {
        return npu_err(format!(
            "{name} offers no system interface of API version {}.x",
            ffi::QNN_SYSTEM_API_VERSION_MAJOR
        ));
    };
    // The union's one member is the table of this header version.
    let api =
        unsafe { *(ptr::addr_of!(sys.__bindgen_anon_1) as *const ffi::MllmQnnSystemInterfaceImpl) };
    let (Some(create), Some(info), Some(free)) = (
        api.systemContextCreate,
        api.systemContextGetBinaryInfo,
        api.systemContextFree,
    ) else {
        return npu_err(format!("{name} lacks the system context functions"));
    };
    let mut ctx: ffi::QnnSystemContext_Handle_t = ptr::null_mut();
    check("systemContextCreate", unsafe { create(&mut ctx) })?;
    let mut bi: *const ffi::QnnSystemContext_BinaryInfo_t = ptr::null();
    let mut size: ffi::Qnn_ContextBinarySize_t = 0;
    let r = unsafe {
        info(
            ctx,
            binary.as_mut_ptr().cast(),
            binary.len() as u64,
            &mut bi,
            &mut size,
        )
    };
    let graphs = check(
        "systemContextGetBinaryInfo (is this a QNN context binary?)",
        r,
    )
    .and_then(|_| unsafe { read_graphs(bi) });
    unsafe { free(ctx) };
    graphs
}

/// # Safety
/// `bi` must be the binary info the system context returned, still alive.
unsafe fn read_graphs(bi: *const ffi::QnnSystemContext_BinaryInfo_t) -> NpuResult<Vec<GraphInfo>> {
    let Some(bi) = bi.as_ref() else {
        return npu_err("the context binary has no metadata");
    };
    let (num, graphs) = match bi.version {
        ffi::QNN_SYSTEM_CONTEXT_BINARY_INFO_VERSION_1 => {
            let v = &bi.__bindgen_anon_1.contextBinaryInfoV1;
            (v.numGraphs, v.graphs)
        }
        ffi::QNN_SYSTEM_CONTEXT_BINARY_INFO_VERSION_2 => {
            let v = &bi.__bindgen_anon_1.contextBinaryInfoV2;
            (v.numGraphs, v.graphs)
        }
        other => {
            return npu_err(format!(
                "context binary info of version {other}; this build reads versions 1 and 2"
            ))
        }
    };
    let mut out = vec![];
    for g in std::slice::from_raw_parts(graphs, num as usize) {
        if g.version != ffi::QNN_SYSTEM_CONTEXT_GRAPH_INFO_VERSION_1 {
            return npu_err(format!(
                "graph info of version {}; this build reads version 1",
                g.version
            ));
        }
        let v = &g.__bindgen_anon_1.graphInfoV1;
        let tensors = |p: *const ffi::Qnn_Tensor_t, n: u32| -> NpuResult<Vec<TensorInfo>> {
            if p.is_null() {
                return Ok(vec![]);
            }
            std::slice::from_raw_parts(p, n as usize)
                .iter()
                .map(|t| tensor_info(t))
                .collect()
        };
        out.push(GraphInfo {
            name: CStr::from_ptr(v.graphName).to_string_lossy().into_owned(),
            inputs: tensors(v.graphInputs, v.numGraphInputs)?,
            outputs: tensors(v.graphOutputs, v.numGraphOutputs)?,
        });
    }
    Ok(out)
}

/// The backend, device and context of one binary; freed in reverse order
/// when the last graph of it is dropped. Holds the library open.
pub(crate) struct Core {
    pub api: ffi::MllmQnnInterfaceImpl,
    backend: ffi::Qnn_BackendHandle_t,
    device: ffi::Qnn_DeviceHandle_t,
    context: ffi::Qnn_ContextHandle_t,
    _lib: Library,
}

impl Drop for Core {
    fn drop(&mut self) {
        // SAFETY: handles made by this table, freed once, children first.
        unsafe {
            if let Some(f) = self.api.contextFree {
                f(self.context, ptr::null_mut());
            }
            if !self.device.is_null() {
                if let Some(f) = self.api.deviceFree {
                    f(self.device);
                }
            }
            if let Some(f) = self.api.backendFree {
                f(self.backend);
            }
        }
    }
}

/// A context created from a binary, and the graphs it holds.
pub struct QnnContext {
    core: Rc<Core>,
    graphs: Vec<GraphInfo>,
    path: String,
}

impl QnnContext {
    /// Loads the backend library and creates a context from `binary`.
    pub fn from_binary(binary: &Path) -> NpuResult<QnnContext> {
        let path = binary.display().to_string();
        let mut bytes = std::fs::read(binary).map_err(|e| NpuError(format!("{path}: {e}")))?;
        let graphs = binary_graphs(&mut bytes).map_err(|e| NpuError(format!("{path}: {e}")))?;
        let name = lib_name("MLLM_QNN_BACKEND_LIB", DEFAULT_BACKEND_LIB);
        let lib = open_lib(&name, "MLLM_QNN_BACKEND_LIB")?;
        let mut list: *mut *const ffi::QnnInterface_t = ptr::null_mut();
        let mut n = 0u32;
        {
            // SAFETY: the symbol's type is the header's QnnInterface_getProviders.
            let get: libloading::Symbol<GetProviders> =
                unsafe { lib.get(b"QnnInterface_getProviders\0") }
                    .map_err(|e| NpuError(format!("{name} is not a QNN backend library: {e}")))?;
            check("QnnInterface_getProviders", unsafe {
                get(&mut list, &mut n)
            })?;
        }
        let providers = unsafe { std::slice::from_raw_parts(list, n as usize) };
        let Some(iface) = providers
            .iter()
            .filter_map(|p| unsafe { p.as_ref() })
            .find(|p| p.apiVersion.coreApiVersion.major == ffi::QNN_API_VERSION_MAJOR)
        else {
            return npu_err(format!(
                "{name} offers no interface of QNN API {}.x (this build's headers)",
                ffi::QNN_API_VERSION_MAJOR
            ));
        };
        let api =
            unsafe { *(ptr::addr_of!(iface.__bindgen_anon_1) as *const ffi::MllmQnnInterfaceImpl) };
        let (Some(backend_create), Some(from_binary)) =
            (api.backendCreate, api.contextCreateFromBinary)
        else {
            return npu_err(format!(
                "{name} lacks backendCreate / contextCreateFromBinary"
            ));
        };
        let mut backend: ffi::Qnn_BackendHandle_t = ptr::null_mut();
        check("backendCreate", unsafe {
            backend_create(ptr::null_mut(), ptr::null_mut(), &mut backend)
        })?;
        // A device when the backend has them (HTP does); none otherwise.
        let mut device: ffi::Qnn_DeviceHandle_t = ptr::null_mut();
        if let Some(device_create) = api.deviceCreate {
            let r = unsafe { device_create(ptr::null_mut(), ptr::null_mut(), &mut device) };
            if r != ffi::QNN_SUCCESS as ffi::Qnn_ErrorHandle_t {
                device = ptr::null_mut();
            }
        }
        let mut core = Core {
            api,
            backend,
            device,
            context: ptr::null_mut(),
            _lib: lib,
        };
        let mut context: ffi::Qnn_ContextHandle_t = ptr::null_mut();
        check(
            &format!(
                "contextCreateFromBinary of {path} (a binary for another SoC or SDK version?)"
            ),
            unsafe {
                from_binary(
                    core.backend,
                    core.device,
                    ptr::null_mut(),
                    bytes.as_ptr().cast(),
                    bytes.len() as u64,
                    &mut context,
                    ptr::null_mut(),
                )
            },
        )?;
        core.context = context;
        Ok(QnnContext {
            core: Rc::new(core),
            graphs,
            path,
        })
    }

    pub fn graph_names(&self) -> Vec<String> {
        self.graphs.iter().map(|g| g.name.clone()).collect()
    }

    /// Graph `name` (None: the binary's only graph) with the I/O `inputs`
    /// and `outputs` of its io.json.
    pub fn graph(
        &self,
        name: Option<&str>,
        inputs: &[super::PortSpec],
        outputs: &[super::PortSpec],
    ) -> NpuResult<QnnGraph> {
        let info = match name {
            Some(n) => self.graphs.iter().find(|g| g.name == n),
            None if self.graphs.len() == 1 => self.graphs.first(),
            None => None,
        };
        let Some(info) = info else {
            return npu_err(format!(
                "{} has no graph {}; it holds: {}",
                self.path,
                name.map_or("(one was expected)".to_string(), |n| format!("`{n}`")),
                self.graph_names().join(", ")
            ));
        };
        let Some(retrieve) = self.core.api.graphRetrieve else {
            return npu_err("the backend lacks graphRetrieve");
        };
        let c_name = CString::new(info.name.as_str()).map_err(|e| NpuError(e.to_string()))?;
        let mut handle: ffi::Qnn_GraphHandle_t = ptr::null_mut();
        check(&format!("graphRetrieve of `{}`", info.name), unsafe {
            retrieve(self.core.context, c_name.as_ptr(), &mut handle)
        })?;
        QnnGraph::new(self.core.clone(), handle, info, inputs, outputs)
    }
}
