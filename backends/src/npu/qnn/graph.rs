//! One graph of a QNN context bound to host buffers: each of the graph's
//! input and output tensors (as the context binary describes them) is
//! matched by name to a port of the export's io.json, gets a client buffer
//! of its device element type (`convert::Wire`: float32, float16, int32
//! ids, 8/16-bit fixed point), and each `run` converts the host data in,
//! calls `graphExecute` and converts the outputs back to f32.

use std::ffi::CString;
use std::ptr;
use std::rc::Rc;

use super::super::convert::{decode, encode, Wire};
use super::super::{npu_err, output_buffer, HostData, NpuError, NpuResult, PortSpec, StaticGraph};
use super::{check, ffi, Core, GraphInfo, TensorInfo};

/// The converter turns names into C identifiers (`past_key.0` ->
/// `past_key_0`); compare names that way.
fn ident(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

fn wire_of(t: &TensorInfo) -> NpuResult<Wire> {
    let fixed = |bits: u32, signed: bool| -> NpuResult<Wire> {
        let Some((scale, offset)) = t.scale_offset else {
            return npu_err(format!(
                "tensor `{}` is fixed point without one scale and offset; requantize its I/O per tensor",
                t.name
            ));
        };
        Ok(if signed {
            Wire::SFixed {
                bits,
                scale,
                offset,
            }
        } else {
            Wire::UFixed {
                bits,
                scale,
                offset,
            }
        })
    };
    if t.other_encoding {
        return npu_err(format!(
            "tensor `{}` has a per-axis or bit-width encoding, which this runtime cannot feed",
            t.name
        ));
    }
    match t.data_type {
        ffi::QNN_DATATYPE_FLOAT_32 => Ok(Wire::F32),
        ffi::QNN_DATATYPE_FLOAT_16 => Ok(Wire::F16),
        ffi::QNN_DATATYPE_INT_32 => Ok(Wire::I32),
        ffi::QNN_DATATYPE_INT_64 => Ok(Wire::I64),
        ffi::QNN_DATATYPE_UINT_32 => Ok(Wire::U32),
        ffi::QNN_DATATYPE_UFIXED_POINT_8 => fixed(8, false),
        ffi::QNN_DATATYPE_UFIXED_POINT_16 => fixed(16, false),
        ffi::QNN_DATATYPE_SFIXED_POINT_8 => fixed(8, true),
        ffi::QNN_DATATYPE_SFIXED_POINT_16 => fixed(16, true),
        other => npu_err(format!(
            "tensor `{}` has QNN data type 0x{other:x}, which this runtime cannot feed",
            t.name
        )),
    }
}

/// One graph tensor with its io.json port (None: an output nobody reads)
/// and the client buffer QNN reads or writes.
struct Bound {
    port: Option<PortSpec>,
    info: TensorInfo,
    c_name: CString,
    dims: Vec<u32>,
    wire: Wire,
    numel: usize,
    buf: Vec<u8>,
}

impl Bound {
    fn new(info: &TensorInfo, ports: &[PortSpec], graph: &str) -> NpuResult<Bound> {
        let port = ports
            .iter()
            .find(|p| ident(&p.name) == ident(&info.name))
            .cloned();
        let numel: usize = info.dims.iter().map(|&d| d as usize).product();
        if let Some(p) = &port {
            if p.numel() != numel {
                return npu_err(format!(
                    "{graph}: tensor `{}` has dims {:?}; io.json's `{}` is {:?}",
                    info.name, info.dims, p.name, p.shape
                ));
            }
        }
        let wire = wire_of(info)?;
        Ok(Bound {
            port,
            c_name: CString::new(info.name.as_str()).map_err(|e| NpuError(e.to_string()))?,
            dims: info.dims.clone(),
            wire,
            numel,
            buf: vec![0; numel * wire.bytes()],
            info: info.clone(),
        })
    }

    /// The tensor as graphExecute reads it, pointing at our buffers.
    fn tensor(&mut self) -> ffi::Qnn_Tensor_t {
        let mut t = ffi::Qnn_Tensor_t {
            version: ffi::QNN_TENSOR_VERSION_1,
            ..Default::default()
        };
        let mut v = ffi::Qnn_TensorV1_t {
            id: self.info.id,
            name: self.c_name.as_ptr(),
            type_: self.info.tensor_type,
            dataFormat: self.info.data_format,
            dataType: self.info.data_type,
            rank: self.dims.len() as u32,
            dimensions: self.dims.as_mut_ptr(),
            memType: ffi::QNN_TENSORMEMTYPE_RAW,
            ..Default::default()
        };
        if let Some((scale, offset)) = self.info.scale_offset {
            v.quantizeParams.encodingDefinition = ffi::QNN_DEFINITION_DEFINED;
            v.quantizeParams.quantizationEncoding = ffi::QNN_QUANTIZATION_ENCODING_SCALE_OFFSET;
            v.quantizeParams.__bindgen_anon_1.scaleOffsetEncoding =
                ffi::Qnn_ScaleOffset_t { scale, offset };
        }
        v.__bindgen_anon_1.clientBuf = ffi::Qnn_ClientBuffer_t {
            data: self.buf.as_mut_ptr().cast(),
            dataSize: self.buf.len() as u32,
        };
        t.__bindgen_anon_1.v1 = v;
        t
    }
}

/// A retrieved graph of a QNN context, run with client buffers.
pub struct QnnGraph {
    core: Rc<Core>,
    handle: ffi::Qnn_GraphHandle_t,
    name: String,
    inputs: Vec<Bound>,
    outputs: Vec<Bound>,
}

impl QnnGraph {
    pub(super) fn new(
        core: Rc<Core>,
        handle: ffi::Qnn_GraphHandle_t,
        info: &GraphInfo,
        inputs: &[PortSpec],
        outputs: &[PortSpec],
    ) -> NpuResult<QnnGraph> {
        let label = format!("QNN graph `{}`", info.name);
        let ins = info
            .inputs
            .iter()
            .map(|t| Bound::new(t, inputs, &label))
            .collect::<NpuResult<Vec<_>>>()?;
        let outs = info
            .outputs
            .iter()
            .map(|t| Bound::new(t, outputs, &label))
            .collect::<NpuResult<Vec<_>>>()?;
        if let Some(b) = ins.iter().find(|b| b.port.is_none()) {
            return npu_err(format!(
                "{label} takes `{}`, which io.json does not list: was the binary built from this export?",
                b.info.name
            ));
        }
        let missing = |ports: &[PortSpec], bound: &[Bound]| {
            ports
                .iter()
                .find(|p| !bound.iter().any(|b| b.port.as_ref() == Some(p)))
                .map(|p| p.name.clone())
        };
        if let Some(n) = missing(inputs, &ins).or_else(|| missing(outputs, &outs)) {
            return npu_err(format!(
                "{label} has no tensor for io.json's `{n}` (the graph's tensors: {})",
                info.inputs
                    .iter()
                    .chain(&info.outputs)
                    .map(|t| t.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        Ok(QnnGraph {
            core,
            handle,
            name: info.name.clone(),
            inputs: ins,
            outputs: outs,
        })
    }
}

impl StaticGraph for QnnGraph {
    fn label(&self) -> String {
        format!("QNN graph `{}`", self.name)
    }

    fn run(
        &mut self,
        inputs: &[(&str, HostData)],
        outputs: &mut [(&str, &mut [f32])],
    ) -> NpuResult<()> {
        let label = self.label();
        for b in &mut self.inputs {
            let Some(port) = &b.port else { continue };
            let Some((_, data)) = inputs.iter().find(|(n, _)| *n == port.name) else {
                return npu_err(format!("{label}: input `{}` was not given", port.name));
            };
            if data.dtype() != port.dtype || data.len() != b.numel {
                return npu_err(format!(
                    "{label}: input `{}` is {} x {}; the graph takes {} {:?}",
                    port.name,
                    data.dtype().name(),
                    data.len(),
                    port.dtype.name(),
                    port.shape
                ));
            }
            b.buf.clear();
            encode(*data, b.wire, &mut b.buf)
                .map_err(|e| NpuError(format!("{label}: input `{}`: {e}", port.name)))?;
        }
        let ins: Vec<ffi::Qnn_Tensor_t> = self.inputs.iter_mut().map(Bound::tensor).collect();
        let mut outs: Vec<ffi::Qnn_Tensor_t> = self.outputs.iter_mut().map(Bound::tensor).collect();
        let Some(execute) = self.core.api.graphExecute else {
            return npu_err("the backend lacks graphExecute");
        };
        // SAFETY: every tensor points at a live buffer of its size, owned by
        // `self` for the call.
        check(&format!("graphExecute of {label}"), unsafe {
            execute(
                self.handle,
                ins.as_ptr(),
                ins.len() as u32,
                outs.as_mut_ptr(),
                outs.len() as u32,
                ptr::null_mut(),
                ptr::null_mut(),
            )
        })?;
        for b in &self.outputs {
            let Some(port) = &b.port else { continue };
            if let Some(buf) = output_buffer(outputs, port, &label)? {
                decode(&b.buf, b.wire, buf)
                    .map_err(|e| NpuError(format!("{label}: output `{}`: {e}", port.name)))?;
            }
        }
        Ok(())
    }
}
