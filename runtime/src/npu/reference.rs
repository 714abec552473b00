//! A `StaticGraph` on the CPU, with no vendor: the graph `mllm export`
//! lowers (the model's step captured for `seq` tokens against `context`
//! rows and prepared for io.json's target, as the export does) run by our
//! compiled executor, with the static I/O
//! an NPU graph has. Each step takes the whole past buffers and `past_len`
//! as inputs, attends over rows `0..past_len` of them plus the step's rows,
//! and returns the step's keys and values as `present_*` outputs; nothing
//! is kept between steps. It lets the host loop be tested end to end here,
//! and checks an export directory's io.json against the model it came from.

use std::collections::HashMap;

use mllm_backends::npu::{
    inputs_in_order, output_buffer, HostData, NpuError, NpuResult, StaticGraph,
};
use mllm_backends::{CpuBackend, DType, KvCache, Tensor};
use mllm_graph::onnx::{self, ExportOptions, Target};
use mllm_graph::Compiled;
use mllm_interpreter::Model;

use super::io::GraphIo;

pub struct ReferenceGraph {
    compiled: Compiled<CpuBackend>,
    io: GraphIo,
    /// (row length of keys, of values) per layer, in io.json's order.
    rows: Vec<(usize, usize)>,
}

fn ne(e: impl std::fmt::Display) -> NpuError {
    NpuError(e.to_string())
}

fn npu_err<T>(msg: impl Into<String>) -> NpuResult<T> {
    Err(NpuError(msg.into()))
}

impl ReferenceGraph {
    /// Captures `model`'s step for `io` (its `seq` and `context`) and
    /// checks that the graph's I/O is what io.json lists.
    pub fn capture(model: &Model, io: &GraphIo) -> NpuResult<ReferenceGraph> {
        let g = mllm_interpreter::compile::capture_with_kv(
            model,
            &CpuBackend,
            io.seq,
            io.context,
            false,
            DType::F32,
            false,
        )
        .map_err(NpuError)?;
        // The graph the export lowered: fold, cse, dce and the target's
        // rewrites (`--target qnn` takes its rotary tables as inputs).
        let target = match io.target.as_str() {
            "qnn" => Target::Qnn,
            "ascend" => Target::Ascend,
            _ => Target::Generic,
        };
        let opts = ExportOptions {
            target,
            ..ExportOptions::default()
        };
        let (g, _) = onnx::prepare(g, &opts).map_err(ne)?;
        let mut names: Vec<(String, Vec<usize>)> = g
            .inputs()
            .map(|(n, id)| (n.to_string(), g.values[id].meta.shape.clone()))
            .chain(
                g.outputs
                    .iter()
                    .map(|(n, id)| (n.clone(), g.values[*id].meta.shape.clone())),
            )
            .collect();
        let mut listed: Vec<(String, Vec<usize>)> = io
            .inputs
            .iter()
            .chain(&io.outputs)
            .map(|p| (p.name.clone(), p.shape.clone()))
            .collect();
        names.sort();
        listed.sort();
        if names != listed {
            return npu_err(format!(
                "the model's graph for {} tokens has I/O {names:?}; io.json lists {listed:?}",
                io.seq
            ));
        }
        let weights: HashMap<&str, &Tensor> =
            model.weights.iter().map(|(n, t)| (n.as_str(), t)).collect();
        let compiled = Compiled::new(g, CpuBackend, &|name| {
            weights.get(name).map(|t| (*t).clone())
        })
        .map_err(ne)?;
        let row = |name: &str| {
            io.input(name)
                .map_or(0, |p| p.shape.iter().skip(1).product::<usize>())
        };
        let rows = io
            .layers
            .iter()
            .map(|l| (row(&l.past_key), row(&l.past_value)))
            .collect();
        Ok(ReferenceGraph {
            compiled,
            io: io.clone(),
            rows,
        })
    }
}

fn tensor(d: HostData, shape: &[usize]) -> NpuResult<Tensor> {
    match d {
        // The graph computes on i32 ids and positions; the export casts its
        // int64 inputs the same way.
        HostData::I64(v) => Tensor::from_i32(v.iter().map(|&x| x as i32).collect(), shape.to_vec()),
        HostData::F32(v) => Tensor::from_f32(v.to_vec(), shape.to_vec()),
    }
    .map_err(ne)
}

impl StaticGraph for ReferenceGraph {
    fn label(&self) -> String {
        format!("cpu reference graph of {} tokens", self.io.seq)
    }

    fn run(
        &mut self,
        inputs: &[(&str, HostData)],
        outputs: &mut [(&str, &mut [f32])],
    ) -> NpuResult<()> {
        let label = self.label();
        let given = inputs_in_order(&self.io.inputs, inputs, &label)?;
        let by_name = |name: &str| {
            self.io
                .inputs
                .iter()
                .position(|p| p.name == name)
                .map(|i| given[i])
        };
        let past = match by_name("past_len") {
            Some(HostData::I64(p)) => p[0],
            _ => return npu_err("past_len was not given"),
        };
        let (n, c) = (self.io.seq, self.io.context);
        if past < 0 || past as usize + n > c {
            return npu_err(format!(
                "past_len {past} with {n} new rows does not fit {c} rows"
            ));
        }
        let past = past as usize;
        // The executor's cache holds exactly the rows the graph may see.
        let mut kv = KvCache::new();
        for (l, &(kr, vr)) in self.io.layers.iter().zip(&self.rows) {
            let (Some(HostData::F32(k)), Some(HostData::F32(v))) =
                (by_name(&l.past_key), by_name(&l.past_value))
            else {
                return npu_err(format!("layer {}'s past buffers were not given", l.layer));
            };
            if past > 0 {
                let shape = |name: &str, rows: usize| {
                    let mut s = self.io.input(name).map_or(vec![], |p| p.shape.clone());
                    s[0] = rows;
                    s
                };
                let kt = tensor(HostData::F32(&k[..past * kr]), &shape(&l.past_key, past))?;
                let vt = tensor(HostData::F32(&v[..past * vr]), &shape(&l.past_value, past))?;
                kv.append(l.layer, &kt, &vt).map_err(NpuError)?;
            }
        }
        let mut feed = vec![];
        for (p, d) in self.io.inputs.iter().zip(&given) {
            let kv_input = p.name == "past_len"
                || self
                    .io
                    .layers
                    .iter()
                    .any(|l| p.name == l.past_key || p.name == l.past_value);
            if !kv_input {
                feed.push((p.name.as_str(), tensor(*d, &p.shape)?));
            }
        }
        let out = self.compiled.run(&feed, &mut kv).map_err(ne)?;
        for spec in &self.io.outputs {
            let Some(buf) = output_buffer(outputs, spec, &label)? else {
                continue;
            };
            if let Some((_, t)) = out.iter().find(|(name, _)| *name == spec.name) {
                buf.copy_from_slice(&t.to_f32_vec().map_err(ne)?);
                continue;
            }
            // A present_* output: the rows the step appended to the cache.
            let Some((i, l, keys)) = self.io.layers.iter().enumerate().find_map(|(i, l)| {
                if spec.name == l.present_key {
                    Some((i, l, true))
                } else if spec.name == l.present_value {
                    Some((i, l, false))
                } else {
                    None
                }
            }) else {
                return npu_err(format!("{label} did not produce `{}`", spec.name));
            };
            let (kr, vr) = self.rows[i];
            let empty = |r: usize, name: &str| {
                let mut s = self.io.input(name).map_or(vec![], |p| p.shape.clone());
                s[0] = 0;
                Tensor::from_f32(vec![], s).map_err(ne).map(|t| (t, r))
            };
            let (ek, _) = empty(kr, &l.past_key)?;
            let (ev, _) = empty(vr, &l.past_value)?;
            let (all_k, all_v) = kv.append(l.layer, &ek, &ev).map_err(NpuError)?;
            let (all, row) = if keys { (all_k, kr) } else { (all_v, vr) };
            let all = all.to_f32_vec().map_err(ne)?;
            buf.copy_from_slice(&all[past * row..(past + n) * row]);
        }
        Ok(())
    }
}
