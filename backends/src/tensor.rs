//! `Tensor`: a shape over a shared, immutable buffer. Tensors are always
//! row-major contiguous; a tensor may be a window (`offset`) into a larger
//! buffer, which is how mmapped weights and KV-cache prefixes avoid copies.

use std::sync::Arc;

use half::{bf16, f16};

use crate::dtype::DType;
use crate::error::{dtype_err, invalid, shape_err, Result};
use crate::quant::{self, QuantType};

/// Largest element count a single tensor may have. Guards scripts and corrupt
/// files from asking for absurd allocations (which would abort, not error).
pub const MAX_ELEMENTS: usize = 1 << 31;

/// Owner of raw bytes (an mmapped file, usually) that a tensor can borrow.
pub trait ByteOwner: Send + Sync {
    fn bytes(&self) -> &[u8];

    /// The caller will not read `start..start + len` again (a backend
    /// copied those bytes into a layout of its own): a file mapping may
    /// drop their pages from memory (read back from the file if touched).
    fn release(&self, _start: usize, _len: usize) {}
}

/// The storage behind tensors.
#[derive(Clone)]
pub enum Buffer {
    F32(Vec<f32>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
    I32(Vec<i32>),
    /// Borrowed bytes, `start..start+len` of `owner`, aligned for `dtype`
    /// (checked when made). The only storage of quantized dtypes, whose
    /// blocks are read bytewise (no alignment needed).
    Bytes {
        owner: Arc<dyn ByteOwner>,
        start: usize,
        len: usize,
        dtype: DType,
    },
    /// Memory a device backend owns (an OpenCL buffer). The host sees its
    /// dtype and size only; reading it is the backend's `download`.
    Device(DeviceMem),
}

/// A device allocation behind a tensor: the backend that made it downcasts
/// `mem` to its own type; `len` counts elements of `dtype` (whole blocks
/// for a quantized dtype, whatever layout the device keeps them in).
#[derive(Clone)]
pub struct DeviceMem {
    pub backend: &'static str,
    pub dtype: DType,
    pub len: usize,
    pub mem: Arc<dyn std::any::Any + Send + Sync>,
}

impl Buffer {
    pub fn dtype(&self) -> DType {
        match self {
            Buffer::F32(_) => DType::F32,
            Buffer::F16(_) => DType::F16,
            Buffer::BF16(_) => DType::BF16,
            Buffer::I32(_) => DType::I32,
            Buffer::Bytes { dtype, .. } => *dtype,
            Buffer::Device(d) => d.dtype,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Buffer::F32(v) => v.len(),
            Buffer::F16(v) => v.len(),
            Buffer::BF16(v) => v.len(),
            Buffer::I32(v) => v.len(),
            Buffer::Bytes { len, dtype, .. } => len / dtype.size() * dtype.block_size(),
            Buffer::Device(d) => d.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn raw(&self) -> &[u8] {
        match self {
            Buffer::Bytes {
                owner, start, len, ..
            } => &owner.bytes()[*start..*start + *len],
            _ => &[],
        }
    }
}

/// Owned bytes behind a tensor made in memory (`Tensor::from_quant`, or a
/// reader's rearranged copy).
#[derive(Clone)]
pub struct OwnedBytes(pub Vec<u8>);

impl ByteOwner for OwnedBytes {
    fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// A typed view of float data, whatever its storage dtype.
#[derive(Clone, Copy)]
pub enum FloatSlice<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
    BF16(&'a [bf16]),
}

impl<'a> FloatSlice<'a> {
    pub fn len(&self) -> usize {
        match self {
            FloatSlice::F32(s) => s.len(),
            FloatSlice::F16(s) => s.len(),
            FloatSlice::BF16(s) => s.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn sub(&self, start: usize, len: usize) -> FloatSlice<'a> {
        match self {
            FloatSlice::F32(s) => FloatSlice::F32(&s[start..start + len]),
            FloatSlice::F16(s) => FloatSlice::F16(&s[start..start + len]),
            FloatSlice::BF16(s) => FloatSlice::BF16(&s[start..start + len]),
        }
    }

    /// Widens `self` into `out` (same length).
    pub fn widen_into(&self, out: &mut [f32]) {
        match self {
            FloatSlice::F32(s) => out.copy_from_slice(s),
            FloatSlice::F16(s) => half::slice::HalfFloatSliceExt::convert_to_f32_slice(*s, out),
            FloatSlice::BF16(s) => {
                for (o, v) in out.iter_mut().zip(s.iter()) {
                    *o = f32::from_bits((v.to_bits() as u32) << 16);
                }
            }
        }
    }

    pub fn to_vec(&self) -> Vec<f32> {
        let mut v = vec![0.0; self.len()];
        self.widen_into(&mut v);
        v
    }
}

#[derive(Clone)]
pub struct Tensor {
    buf: Arc<Buffer>,
    offset: usize,
    shape: Vec<usize>,
}

/// A quantized tensor's view must start on a block and have rows (the last
/// dimension) of whole blocks; plain dtypes always pass.
fn check_blocks(dtype: DType, offset: usize, shape: &[usize]) -> Result<()> {
    let bs = dtype.block_size();
    if bs == 1 {
        return Ok(());
    }
    let cols = shape.last().copied();
    if cols.is_none_or(|c| !c.is_multiple_of(bs)) || !offset.is_multiple_of(bs) {
        return shape_err(
            "tensor",
            format!(
                "{dtype} stores rows of whole {bs}-value blocks; shape {shape:?} at element {offset} does not fit"
            ),
        );
    }
    Ok(())
}

pub fn numel(shape: &[usize]) -> Result<usize> {
    let mut n: usize = 1;
    for &d in shape {
        n = match n.checked_mul(d) {
            Some(n) if n <= MAX_ELEMENTS => n,
            _ => return invalid("tensor", format!("shape {shape:?} is too large")),
        };
    }
    Ok(n)
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tensor({}, {:?})", self.dtype(), self.shape)
    }
}

impl Tensor {
    /// A tensor over `buf[offset .. offset + numel(shape)]` (in elements;
    /// for a quantized buffer both must fall on whole rows of blocks).
    pub fn from_buffer(buf: Arc<Buffer>, offset: usize, shape: Vec<usize>) -> Result<Tensor> {
        let n = numel(&shape)?;
        check_blocks(buf.dtype(), offset, &shape)?;
        if offset.checked_add(n).is_none_or(|end| end > buf.len()) {
            return shape_err(
                "tensor",
                format!(
                    "shape {shape:?} at offset {offset} exceeds a buffer of {} elements",
                    buf.len()
                ),
            );
        }
        Ok(Tensor { buf, offset, shape })
    }

    pub fn from_f32(data: Vec<f32>, shape: Vec<usize>) -> Result<Tensor> {
        Self::checked_new(Buffer::F32(data), shape)
    }

    pub fn from_i32(data: Vec<i32>, shape: Vec<usize>) -> Result<Tensor> {
        Self::checked_new(Buffer::I32(data), shape)
    }

    pub fn from_f16(data: Vec<f16>, shape: Vec<usize>) -> Result<Tensor> {
        Self::checked_new(Buffer::F16(data), shape)
    }

    pub fn from_bf16(data: Vec<bf16>, shape: Vec<usize>) -> Result<Tensor> {
        Self::checked_new(Buffer::BF16(data), shape)
    }

    fn checked_new(buf: Buffer, shape: Vec<usize>) -> Result<Tensor> {
        let n = numel(&shape)?;
        if n != buf.len() {
            return shape_err(
                "tensor",
                format!("{} elements do not fill shape {shape:?}", buf.len()),
            );
        }
        Ok(Tensor {
            buf: Arc::new(buf),
            offset: 0,
            shape,
        })
    }

    /// A quantized tensor of logical `shape` (`[out, in]` for a linear
    /// weight) over `bytes`, whole rows of `ty` blocks, row-major.
    pub fn from_quant(bytes: Vec<u8>, ty: QuantType, shape: Vec<usize>) -> Result<Tensor> {
        let len = bytes.len();
        Tensor::from_bytes(Arc::new(OwnedBytes(bytes)), 0, len, DType::Quant(ty), shape)
    }

    /// Borrows `len` bytes at `start` of `owner` as a tensor without copying
    /// when they are aligned for `dtype`; copies them otherwise. Quantized
    /// dtypes are always borrowed: their rows (the last dimension) must be
    /// whole blocks, `len` = rows * blocks per row * block bytes.
    pub fn from_bytes(
        owner: Arc<dyn ByteOwner>,
        start: usize,
        len: usize,
        dtype: DType,
        shape: Vec<usize>,
    ) -> Result<Tensor> {
        numel(&shape)?;
        check_blocks(dtype, 0, &shape)?;
        if dtype.storage_bytes(&shape) != Some(len) {
            return shape_err(
                "tensor",
                format!("{len} bytes do not hold {dtype} of shape {shape:?}"),
            );
        }
        let total = owner.bytes().len();
        if start.checked_add(len).is_none_or(|end| end > total) {
            return invalid(
                "tensor",
                format!(
                    "bytes {start}..{} lie outside a {total}-byte file",
                    start + len
                ),
            );
        }
        let addr = owner.bytes()[start..].as_ptr() as usize;
        if dtype.is_quantized() || addr.is_multiple_of(dtype.size()) {
            let buf = Buffer::Bytes {
                owner,
                start,
                len,
                dtype,
            };
            return Ok(Tensor {
                buf: Arc::new(buf),
                offset: 0,
                shape,
            });
        }
        let bytes = &owner.bytes()[start..start + len];
        let buf = match dtype {
            DType::F32 => Buffer::F32(
                bytes
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            ),
            DType::I32 => Buffer::I32(
                bytes
                    .chunks_exact(4)
                    .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            ),
            DType::F16 => Buffer::F16(
                bytes
                    .chunks_exact(2)
                    .map(|c| f16::from_le_bytes([c[0], c[1]]))
                    .collect(),
            ),
            DType::BF16 => Buffer::BF16(
                bytes
                    .chunks_exact(2)
                    .map(|c| bf16::from_le_bytes([c[0], c[1]]))
                    .collect(),
            ),
            DType::Quant(_) => unreachable!("quantized bytes are always borrowed"),
        };
        Ok(Tensor {
            buf: Arc::new(buf),
            offset: 0,
            shape,
        })
    }

    pub fn scalar_f32(v: f32) -> Tensor {
        Tensor {
            buf: Arc::new(Buffer::F32(vec![v])),
            offset: 0,
            shape: vec![],
        }
    }

    pub fn scalar_i32(v: i32) -> Tensor {
        Tensor {
            buf: Arc::new(Buffer::I32(vec![v])),
            offset: 0,
            shape: vec![],
        }
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn dtype(&self) -> DType {
        self.buf.dtype()
    }

    pub fn buffer(&self) -> &Arc<Buffer> {
        &self.buf
    }

    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Size of dimension `d`, counting from the end when negative.
    pub fn dim(&self, d: isize) -> Option<usize> {
        let r = self.rank() as isize;
        let i = if d < 0 { r + d } else { d };
        (0..r).contains(&i).then(|| self.shape[i as usize])
    }

    /// Same data, new shape (no copy). A quantized tensor's new last
    /// dimension must still be whole blocks.
    pub fn reshaped(&self, shape: Vec<usize>) -> Result<Tensor> {
        if numel(&shape)? != self.numel() {
            return shape_err(
                "reshape",
                format!("cannot reshape {:?} into {shape:?}", self.shape),
            );
        }
        check_blocks(self.dtype(), self.offset, &shape)?;
        Ok(Tensor {
            buf: self.buf.clone(),
            offset: self.offset,
            shape,
        })
    }

    /// Rows `start..end` of the outermost dimension (no copy).
    pub fn narrow0(&self, start: usize, end: usize) -> Result<Tensor> {
        let Some(&d0) = self.shape.first() else {
            return shape_err("slice", "cannot slice a scalar");
        };
        if start > end || end > d0 {
            return shape_err(
                "slice",
                format!("rows {start}..{end} of a dimension of size {d0}"),
            );
        }
        let row: usize = self.shape[1..].iter().product();
        let mut shape = self.shape.clone();
        shape[0] = end - start;
        // Interleaved rows (all dims but the last) stay whole 16-row groups:
        // of a 2-D weight, rows `start..end`; of a 3-D expert stack, whole
        // experts of a multiple of 16 rows each.
        let rows_per = self.shape[1..self.shape.len().saturating_sub(1).max(1)]
            .iter()
            .product::<usize>();
        if self.dtype().quant().is_some_and(|q| q.is_packed())
            && !((start * rows_per).is_multiple_of(quant::packed::ROWS)
                && (end * rows_per).is_multiple_of(quant::packed::ROWS))
        {
            return shape_err(
                "slice",
                format!("rows {start}..{end} split a group of 16 interleaved rows"),
            );
        }
        check_blocks(self.dtype(), self.offset + start * row, &shape)?;
        Ok(Tensor {
            buf: self.buf.clone(),
            offset: self.offset + start * row,
            shape,
        })
    }

    /// The device memory behind this tensor, when a device backend holds it.
    pub fn device(&self) -> Option<&DeviceMem> {
        match &*self.buf {
            Buffer::Device(d) => Some(d),
            _ => None,
        }
    }

    /// An error unless the data is in host memory: host accessors on a
    /// device tensor would otherwise report a confusing dtype mismatch.
    fn on_host(&self, what: &'static str) -> Result<()> {
        match self.device() {
            Some(d) => invalid(
                what,
                format!(
                    "the tensor {:?} lives on the {} device; read it through the backend's download",
                    self.shape, d.backend
                ),
            ),
            None => Ok(()),
        }
    }

    pub fn f32s(&self) -> Result<&[f32]> {
        self.on_host("tensor")?;
        let n = self.numel();
        match &*self.buf {
            Buffer::F32(v) => Ok(&v[self.offset..self.offset + n]),
            b @ Buffer::Bytes {
                dtype: DType::F32, ..
            } => Ok(&bytemuck::cast_slice::<u8, f32>(b.raw())[self.offset..self.offset + n]),
            _ => dtype_err(
                "tensor",
                format!("expected f32 data, found {}", self.dtype()),
            ),
        }
    }

    pub fn i32s(&self) -> Result<&[i32]> {
        self.on_host("tensor")?;
        let n = self.numel();
        match &*self.buf {
            Buffer::I32(v) => Ok(&v[self.offset..self.offset + n]),
            b @ Buffer::Bytes {
                dtype: DType::I32, ..
            } => Ok(&bytemuck::cast_slice::<u8, i32>(b.raw())[self.offset..self.offset + n]),
            _ => dtype_err(
                "tensor",
                format!("expected i32 data, found {}", self.dtype()),
            ),
        }
    }

    /// The data of a float tensor in its stored dtype.
    pub fn floats(&self) -> Result<FloatSlice<'_>> {
        self.on_host("tensor")?;
        let (o, n) = (self.offset, self.numel());
        Ok(match &*self.buf {
            Buffer::F32(v) => FloatSlice::F32(&v[o..o + n]),
            Buffer::F16(v) => FloatSlice::F16(&v[o..o + n]),
            Buffer::BF16(v) => FloatSlice::BF16(&v[o..o + n]),
            b @ Buffer::Bytes { dtype, .. } => match dtype {
                DType::F32 => FloatSlice::F32(&bytemuck::cast_slice(b.raw())[o..o + n]),
                DType::F16 => FloatSlice::F16(&bytemuck::cast_slice(b.raw())[o..o + n]),
                DType::BF16 => FloatSlice::BF16(&bytemuck::cast_slice(b.raw())[o..o + n]),
                DType::I32 => return dtype_err("tensor", "expected float data, found i32"),
                DType::Quant(q) => {
                    return dtype_err(
                        "tensor",
                        format!("expected float data, found quantized {q} blocks"),
                    )
                }
            },
            Buffer::I32(_) => return dtype_err("tensor", "expected float data, found i32"),
            Buffer::Device(_) => return dtype_err("tensor", "expected host data"),
        })
    }

    /// The f32 values borrowed when the tensor is f32, else widened (a copy,
    /// as `to_f32_vec`): kernels read small weights (norm gains) through it
    /// without a copy per step.
    pub fn f32_cow(&self) -> Result<std::borrow::Cow<'_, [f32]>> {
        match self.dtype() {
            DType::F32 => Ok(std::borrow::Cow::Borrowed(self.f32s()?)),
            _ => Ok(std::borrow::Cow::Owned(self.to_f32_vec()?)),
        }
    }

    /// The values widened to f32 (i32 values converted, quantized blocks
    /// dequantized), copying.
    pub fn to_f32_vec(&self) -> Result<Vec<f32>> {
        match self.dtype() {
            DType::I32 => Ok(self.i32s()?.iter().map(|&v| v as f32).collect()),
            DType::Quant(q) if q.is_packed() => {
                let (bytes, ty) = self.quant_bytes()?;
                let k = self.shape.last().copied().unwrap_or(0);
                let n = self.numel() / k.max(1);
                quant::packed::dequantize(ty, bytes, n, k).map_err(|msg| {
                    crate::error::BackendError::Invalid {
                        op: "dequantize",
                        msg,
                    }
                })
            }
            DType::Quant(_) => {
                let (bytes, ty) = self.quant_bytes()?;
                quant::dequantize(ty, bytes, self.numel()).map_err(|msg| {
                    crate::error::BackendError::Invalid {
                        op: "dequantize",
                        msg,
                    }
                })
            }
            _ => Ok(self.floats()?.to_vec()),
        }
    }

    /// The raw ggml blocks of a quantized tensor (row-major, each row of the
    /// last dimension whole blocks) and their type.
    pub fn quant_bytes(&self) -> Result<(&[u8], QuantType)> {
        self.on_host("tensor")?;
        let dtype = self.dtype();
        let Some(ty) = dtype.quant() else {
            return dtype_err(
                "tensor",
                format!("expected quantized blocks, found {dtype}"),
            );
        };
        let (bs, ts) = (ty.block_size(), ty.type_size());
        // Construction keeps offset and length on whole blocks.
        let (first, count) = (self.offset / bs, self.numel() / bs);
        Ok((&self.buf.raw()[first * ts..(first + count) * ts], ty))
    }

    /// Tells the storage owner this tensor's bytes will not be read again
    /// through it (see `ByteOwner::release`): what a backend does after
    /// copying a mapped weight into its own layout, so the mapping's pages
    /// do not stay resident beside the copy.
    pub fn release_storage(&self) {
        if let Buffer::Bytes { owner, start, .. } = &*self.buf {
            if let Ok((bytes, _)) = self.quant_bytes() {
                let base = owner.bytes().as_ptr() as usize;
                let at = bytes.as_ptr() as usize - base;
                debug_assert!(at >= *start);
                owner.release(at, bytes.len());
            }
        }
    }

    /// This tensor as f32, sharing the buffer when it already is f32.
    pub fn to_f32(&self) -> Result<Tensor> {
        if self.dtype() == DType::F32 {
            return Ok(self.clone());
        }
        Tensor::from_f32(self.to_f32_vec()?, self.shape.clone())
    }

    /// The single value of a one-element tensor, as f64.
    pub fn item(&self) -> Result<f64> {
        if self.numel() != 1 {
            return shape_err(
                "item",
                format!("expected one element, found shape {:?}", self.shape),
            );
        }
        Ok(if self.dtype() == DType::I32 {
            self.i32s()?[0] as f64
        } else {
            self.to_f32_vec()?[0] as f64
        })
    }
}
