//! The OpenCL backend's device KV cache (`Backend::kv_append`) against the
//! host `KvCache`, for f32, f16 and q8_0 caches: appends of one and several
//! rows, growth past the reserved context, truncation then append, the
//! stored rows downloaded and compared exactly, and attention over the
//! returned device views equal to the CPU's over the host views. Needs an
//! OpenCL device: CI installs PoCL (a CPU device). The only way to skip is
//! to say so: `MLLM_SKIP_OPENCL=1`, which prints that nothing was tested.

#![cfg(feature = "opencl")]

use mllm_backends::conformance::{nmse, Gen, NMSE_F32};
use mllm_backends::opencl::OpenClBackend;
use mllm_backends::{Backend, CpuBackend, DType, KvCache, Op, Tensor};

fn backend() -> Option<OpenClBackend> {
    if std::env::var_os("MLLM_SKIP_OPENCL").is_some() {
        eprintln!("MLLM_SKIP_OPENCL is set: the OpenCL backend was NOT tested");
        return None;
    }
    match OpenClBackend::new(0) {
        Ok(b) => Some(b),
        Err(e) => panic!("{e} (set MLLM_SKIP_OPENCL=1 to skip these tests knowingly)"),
    }
}

/// The bytes of a host tensor as stored (f32, f16 or q8_0 blocks).
fn stored(t: &Tensor) -> Vec<u8> {
    match t.dtype() {
        DType::F32 => t
            .f32s()
            .expect("f32")
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect(),
        DType::F16 => match t.floats().expect("f16") {
            mllm_backends::FloatSlice::F16(h) => h.iter().flat_map(|x| x.to_le_bytes()).collect(),
            _ => panic!("f16 storage expected"),
        },
        _ => t.quant_bytes().expect("blocks").0.to_vec(),
    }
}

const HK: usize = 2;
const DK: usize = 64;
const DV: usize = 32;

/// One step on both caches: the same rows appended, the views compared
/// bit for bit, and attention over them compared with the CPU's.
fn step(
    cl: &OpenClBackend,
    g: &mut Gen,
    host: &mut KvCache,
    dev: &mut KvCache,
    layer: usize,
    s: usize,
) {
    let k = g.f32(&[s, HK, DK], 3.0);
    let v = g.f32(&[s, HK, DV], 3.0);
    let (hk_, hv_) = host.append(layer, &k, &v).expect("host append");
    let (dk_up, dv_up) = (cl.upload(k).expect("up"), cl.upload(v).expect("up"));
    let (dk_, dv_) = cl
        .kv_append(dev, layer, &dk_up, &dv_up)
        .expect("device append");
    assert!(
        dk_.device().is_some() && dv_.device().is_some(),
        "views stay on the device"
    );
    assert_eq!(dev.len(layer), host.len(layer));
    for (h, d, what) in [(&hk_, &dk_, "keys"), (&hv_, &dv_, "values")] {
        assert_eq!((h.shape(), h.dtype()), (d.shape(), d.dtype()), "{what}");
        let back = cl.download(d).expect("download");
        assert!(
            stored(&back) == stored(h),
            "{} {what} differ after {} rows",
            h.dtype(),
            h.shape()[0]
        );
    }
    // Attention of the new rows over the whole history.
    let q = g.f32(&[s, 4, DK], 2.0);
    let op = Op::Sdpa {
        causal: true,
        scale: 0.125,
        window: 0,
    };
    let want = CpuBackend.run(&op, &[&q, &hk_, &hv_]).expect("cpu sdpa");
    let got = cl.run(&op, &[&q, &dk_, &dv_]).expect("opencl sdpa");
    let got = cl.download(&got).expect("download");
    let e = nmse(
        &got.to_f32_vec().expect("f32"),
        &want.to_f32_vec().expect("f32"),
    );
    assert!(
        e <= NMSE_F32,
        "{} sdpa over {} rows: nmse {e}",
        hk_.dtype(),
        hk_.shape()[0]
    );
}

#[test]
fn device_cache_matches_the_host_cache() {
    let Some(cl) = backend() else { return };
    for dtype in ["f32", "f16", "q8_0"] {
        let dt = DType::parse(dtype).expect("dtype");
        let mut g = Gen::new(11);
        let mut host = KvCache::with_dtype(dt).expect("cache");
        let mut dev = KvCache::with_dtype(dt).expect("cache");
        host.reserve(8);
        dev.reserve(8);
        // One row, five, then growth past the reserve (8) and past the
        // first doubling (16), on two layers.
        for s in [1, 5, 1, 4, 9, 17] {
            for layer in [0, 1] {
                step(&cl, &mut g, &mut host, &mut dev, layer, s);
            }
        }
        // A view taken now keeps its rows through later appends.
        let (k_then, _) = dev_view(&cl, &mut dev, &mut g);
        let before = stored(&cl.download(&k_then).expect("download"));
        // Rewind, then overwrite from there.
        host.truncate(10);
        dev.truncate(10);
        assert_eq!(dev.len(0), 10);
        for s in [1, 3, 30] {
            step(&cl, &mut g, &mut host, &mut dev, 0, s);
        }
        let again = stored(
            &cl.download(&k_then.narrow0(0, 10).expect("rows"))
                .expect("download"),
        );
        assert!(
            before[..again.len()] == again[..],
            "{dtype}: rows before the truncation changed"
        );
        assert!(dev.bytes() > 0);
    }
}

/// Two one-row appends on the device cache alone (layer 0; a truncation
/// below the host's length re-aligns the two) and the views they return.
fn dev_view(cl: &OpenClBackend, dev: &mut KvCache, g: &mut Gen) -> (Tensor, Tensor) {
    let k = cl.upload(g.f32(&[1, HK, DK], 1.0)).expect("up");
    let v = cl.upload(g.f32(&[1, HK, DV], 1.0)).expect("up");
    cl.kv_append(dev, 0, &k, &v).expect("append");
    let (k, v) = cl.kv_append(dev, 0, &k, &v).expect("append");
    (k, v)
}

#[test]
fn device_cache_refuses_what_the_host_cache_refuses() {
    let Some(cl) = backend() else { return };
    let mut q8 = KvCache::with_dtype(DType::parse("q8_0").expect("q8_0")).expect("cache");
    let odd = Tensor::from_f32(vec![0.0; 12], vec![1, 1, 12]).expect("odd");
    let err = cl
        .kv_append(&mut q8, 0, &odd, &odd)
        .expect_err("q8_0 rows of 12");
    assert!(err.to_string().contains("--kv-type f16"), "{err}");
    let mut f = KvCache::new();
    let a = Tensor::from_f32(vec![0.0; 64], vec![1, 2, 32]).expect("a");
    let b = Tensor::from_f32(vec![0.0; 32], vec![1, 1, 32]).expect("b");
    assert!(cl.kv_append(&mut f, 0, &a, &b).is_err(), "heads differ");
    cl.kv_append(&mut f, 0, &a, &a).expect("append");
    let c = Tensor::from_f32(vec![0.0; 64], vec![1, 1, 64]).expect("c");
    let err = cl.kv_append(&mut f, 0, &c, &c).expect_err("other rows");
    assert!(err.to_string().contains("caches rows of"), "{err}");
}
