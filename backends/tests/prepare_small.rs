//! `CpuBackend::prepare_weight` copies small float weights out of a mapped
//! file and releases their range (a mapped norm gain kept a whole 2 MiB
//! page-cache folio resident); large ones stay borrowed.

use std::sync::{Arc, Mutex};

use mllm_backends::{Backend, Buffer, ByteOwner, CpuBackend, DType, Tensor};

/// A file stand-in that records what was released.
struct Recorder {
    bytes: Vec<u8>,
    released: Mutex<Vec<(usize, usize)>>,
}

impl ByteOwner for Recorder {
    fn bytes(&self) -> &[u8] {
        &self.bytes
    }
    fn release(&self, start: usize, len: usize) {
        self.released.lock().unwrap().push((start, len));
    }
}

fn file(values: &[f32], pad: usize) -> Arc<Recorder> {
    let mut bytes = vec![0u8; pad];
    bytes.extend(values.iter().flat_map(|v| v.to_le_bytes()));
    Arc::new(Recorder {
        bytes,
        released: Mutex::new(vec![]),
    })
}

#[test]
fn small_float_weights_are_copied_and_released() {
    let values: Vec<f32> = (0..1000).map(|i| i as f32 * 0.25 - 7.0).collect();
    let rec = file(&values, 64);
    let t = Tensor::from_bytes(rec.clone(), 64, 4000, DType::F32, vec![1000]).unwrap();
    let got = CpuBackend.prepare_weight("norm.weight", t).unwrap();
    assert!(matches!(&**got.buffer(), Buffer::F32(_)), "not copied");
    assert_eq!(got.f32s().unwrap(), &values[..]);
    assert_eq!(*rec.released.lock().unwrap(), vec![(64, 4000)]);
}

#[test]
fn large_float_weights_stay_borrowed() {
    let n = (1 << 20) / 4 + 8;
    let values: Vec<f32> = (0..n).map(|i| (i % 97) as f32).collect();
    let rec = file(&values, 0);
    let t = Tensor::from_bytes(rec.clone(), 0, n * 4, DType::F32, vec![n]).unwrap();
    let got = CpuBackend.prepare_weight("big.weight", t).unwrap();
    assert!(matches!(&**got.buffer(), Buffer::Bytes { .. }), "copied");
    assert!(rec.released.lock().unwrap().is_empty());
    assert_eq!(got.f32s().unwrap(), &values[..]);
}
