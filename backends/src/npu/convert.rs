//! The element types an NPU graph's I/O tensors may have on the device
//! side (`Wire`), and the conversions between them and the host's f32 /
//! i64 data. A vendor's converter may keep float32 I/O, narrow it to
//! float16, quantize it (QNN's fixed point with `float = (q + offset) *
//! scale`) or turn int64 ids into int32; the runtimes read which from the
//! compiled graph and convert here. Vendor-neutral and always built, so it
//! is tested without any SDK.

use half::f16;

use super::{npu_err, HostData, NpuResult};

/// One tensor's device element type.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Wire {
    F32,
    F16,
    I32,
    I64,
    U32,
    /// Unsigned fixed point of 8 or 16 bits: `float = (q + offset) * scale`.
    UFixed {
        bits: u32,
        scale: f32,
        offset: i32,
    },
    /// Signed fixed point of 8 or 16 bits, same rule.
    SFixed {
        bits: u32,
        scale: f32,
        offset: i32,
    },
}

impl Wire {
    pub fn bytes(self) -> usize {
        match self {
            Wire::F32 | Wire::I32 | Wire::U32 => 4,
            Wire::F16 => 2,
            Wire::I64 => 8,
            Wire::UFixed { bits, .. } | Wire::SFixed { bits, .. } => bits as usize / 8,
        }
    }

    fn range(self) -> (f64, f64) {
        match self {
            Wire::UFixed { bits, .. } => (0.0, ((1u64 << bits) - 1) as f64),
            Wire::SFixed { bits, .. } => (
                -((1u64 << (bits - 1)) as f64),
                ((1u64 << (bits - 1)) - 1) as f64,
            ),
            _ => (f64::MIN, f64::MAX),
        }
    }
}

fn put_int(out: &mut Vec<u8>, v: i64, bytes: usize) {
    out.extend_from_slice(&v.to_le_bytes()[..bytes]);
}

/// Appends `data` as `wire` elements (little-endian) to `out`.
pub fn encode(data: HostData, wire: Wire, out: &mut Vec<u8>) -> NpuResult<()> {
    out.reserve(data.len() * wire.bytes());
    match (data, wire) {
        (HostData::I64(v), Wire::I64) => v.iter().for_each(|x| put_int(out, *x, 8)),
        (HostData::I64(v), Wire::I32) => {
            for &x in v {
                if i32::try_from(x).is_err() {
                    return npu_err(format!("{x} does not fit the graph's int32 input"));
                }
                put_int(out, x, 4);
            }
        }
        (HostData::I64(v), Wire::U32) => {
            for &x in v {
                if u32::try_from(x).is_err() {
                    return npu_err(format!("{x} does not fit the graph's uint32 input"));
                }
                put_int(out, x, 4);
            }
        }
        (HostData::F32(v), Wire::F32) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        (HostData::F32(v), Wire::F16) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&f16::from_f32(*x).to_le_bytes())),
        (
            HostData::F32(v),
            Wire::UFixed {
                bits,
                scale,
                offset,
            }
            | Wire::SFixed {
                bits,
                scale,
                offset,
            },
        ) => {
            if scale <= 0.0 || !scale.is_finite() {
                return npu_err(format!("a fixed-point tensor with scale {scale}"));
            }
            let (lo, hi) = wire.range();
            for &x in v {
                let q = ((x as f64 / scale as f64).round() - offset as f64).clamp(lo, hi);
                put_int(out, q as i64, bits as usize / 8);
            }
        }
        (d, w) => {
            return npu_err(format!(
                "cannot feed {} data to a {w:?} tensor",
                d.dtype().name()
            ))
        }
    }
    Ok(())
}

/// Reads `out.len()` `wire` elements from `bytes` as f32.
pub fn decode(bytes: &[u8], wire: Wire, out: &mut [f32]) -> NpuResult<()> {
    let n = wire.bytes();
    if bytes.len() != out.len() * n {
        return npu_err(format!(
            "{} bytes do not hold {} {wire:?} values",
            bytes.len(),
            out.len()
        ));
    }
    let chunks = bytes.chunks_exact(n);
    match wire {
        Wire::F32 => chunks
            .zip(out)
            .for_each(|(c, o)| *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        Wire::F16 => chunks
            .zip(out)
            .for_each(|(c, o)| *o = f16::from_le_bytes([c[0], c[1]]).to_f32()),
        Wire::UFixed { scale, offset, .. } => chunks.zip(out).for_each(|(c, o)| {
            let q = if n == 1 {
                c[0] as i64
            } else {
                u16::from_le_bytes([c[0], c[1]]) as i64
            };
            *o = ((q + offset as i64) as f64 * scale as f64) as f32;
        }),
        Wire::SFixed { scale, offset, .. } => chunks.zip(out).for_each(|(c, o)| {
            let q = if n == 1 {
                c[0] as i8 as i64
            } else {
                i16::from_le_bytes([c[0], c[1]]) as i64
            };
            *o = ((q + offset as i64) as f64 * scale as f64) as f32;
        }),
        Wire::I32 | Wire::I64 | Wire::U32 => {
            return npu_err(format!(
                "an integer ({wire:?}) output where float32 was expected"
            ))
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(x: &[f32], wire: Wire) -> Vec<f32> {
        let mut bytes = vec![];
        encode(HostData::F32(x), wire, &mut bytes).expect("encode");
        assert_eq!(bytes.len(), x.len() * wire.bytes());
        let mut back = vec![0.0; x.len()];
        decode(&bytes, wire, &mut back).expect("decode");
        back
    }

    #[test]
    fn floats_round_trip_within_their_precision() {
        let x: Vec<f32> = (0..33).map(|i| (i as f32 * 0.37).sin() * 7.0).collect();
        assert_eq!(round_trip(&x, Wire::F32), x);
        for (a, b) in round_trip(&x, Wire::F16).iter().zip(&x) {
            assert!((a - b).abs() <= 7.0 * 1e-3, "{a} {b}");
        }
    }

    #[test]
    fn fixed_point_follows_q_plus_offset_times_scale() {
        // [-8, 8) in 16 bits: scale 16/65535, offset -32768 (QNN's sign).
        let scale = 16.0 / 65535.0;
        let u16w = Wire::UFixed {
            bits: 16,
            scale,
            offset: -32768,
        };
        let x: Vec<f32> = (0..31).map(|i| -7.9 + i as f32 * 0.5).collect();
        for (a, b) in round_trip(&x, u16w).iter().zip(&x) {
            assert!((a - b).abs() <= scale / 2.0 + 1e-6, "{a} {b}");
        }
        // Out of range saturates; 8-bit codes are single bytes.
        let u8w = Wire::UFixed {
            bits: 8,
            scale: 0.1,
            offset: -128,
        };
        let mut b = vec![];
        encode(HostData::F32(&[100.0, -100.0, 0.0]), u8w, &mut b).expect("encode");
        assert_eq!(b, [255, 0, 128]);
        let s8 = Wire::SFixed {
            bits: 8,
            scale: 0.5,
            offset: 0,
        };
        assert_eq!(round_trip(&[-3.0, 2.5, 1000.0], s8), [-3.0, 2.5, 63.5]);
    }

    #[test]
    fn ids_narrow_only_when_they_fit() {
        let mut b = vec![];
        encode(HostData::I64(&[1, 70000]), Wire::I32, &mut b).expect("fits");
        assert_eq!(b, [1, 0, 0, 0, 0x70, 0x11, 0x01, 0]);
        assert!(encode(HostData::I64(&[1 << 40]), Wire::I32, &mut vec![]).is_err());
        assert!(encode(HostData::I64(&[-1]), Wire::U32, &mut vec![]).is_err());
        assert!(encode(HostData::I64(&[1]), Wire::F32, &mut vec![]).is_err());
        assert!(decode(&[0; 4], Wire::I32, &mut [0.0]).is_err());
        assert!(decode(&[0; 3], Wire::F32, &mut [0.0]).is_err());
    }
}
