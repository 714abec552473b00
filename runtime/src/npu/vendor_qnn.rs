//! `--backend qnn`: the export directory's graphs from QNN context
//! binaries (`mllm_backends::npu::qnn`), driven by the host loop. A graph's
//! binary is the one `*.bin` (rotary tables `rope_*.bin` aside) in its own
//! directory or in its `qnn/ctx/` (where `--target qnn`'s README has
//! `qnn-context-binary-generator` write it), holding that graph alone; or
//! one binary `DIR/*.bin` holds both, its graphs named with `prefill` and
//! `decode`. Never run on a device (docs/npu_runtime.md).

use std::path::{Path, PathBuf};

use mllm_backends::npu::qnn::QnnContext;

use super::{ExportDir, GraphIo, HostLoop, Stage};
use crate::{Error, Result};

fn binaries(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && p.extension().is_some_and(|x| x == "bin")
                && !p
                    .file_name()
                    .is_some_and(|f| f.to_string_lossy().starts_with("rope_"))
        })
        .collect();
    found.sort();
    found
}

/// The one binary in `dir` or `dir/qnn/ctx`.
fn graph_binary(dir: &Path) -> Result<Option<PathBuf>> {
    for d in [dir.to_path_buf(), dir.join("qnn").join("ctx")] {
        let found = binaries(&d);
        if found.len() > 1 {
            return Err(Error::load(format!(
                "{} holds several context binaries: {}; keep one per graph",
                d.display(),
                found
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        if let Some(p) = found.into_iter().next() {
            return Ok(Some(p));
        }
    }
    Ok(None)
}

fn e(x: impl std::fmt::Display) -> Error {
    Error::load(x.to_string())
}

fn stage(ctx: &QnnContext, name: Option<&str>, io: &GraphIo, dir: &Path) -> Result<Stage> {
    let g = ctx.graph(name, &io.inputs, &io.outputs).map_err(e)?;
    Stage::with_tables(Box::new(g), io.clone(), dir)
}

/// The graph of `ctx` whose name contains `role`.
fn named<'a>(names: &'a [String], role: &str, path: &Path) -> Result<&'a str> {
    let hits: Vec<&String> = names.iter().filter(|n| n.contains(role)).collect();
    match hits.as_slice() {
        [one] => Ok(one.as_str()),
        _ => Err(Error::load(format!("{} holds graphs {}: name one `...{role}...` (qnn-context-binary-generator takes the names of the model libraries)",
            path.display(),
            names.join(", ")
        ))),
    }
}

pub fn open(export: &ExportDir, _device: usize) -> Result<HostLoop> {
    let (decode_dir, decode_io) = &export.decode;
    let own = if decode_dir != &export.dir {
        graph_binary(decode_dir)?
    } else {
        None
    };
    if let Some(bin) = own {
        let ctx = QnnContext::from_binary(&bin).map_err(e)?;
        let decode = stage(&ctx, None, decode_io, decode_dir)?;
        let prefill = match &export.prefill {
            Some((dir, io)) => {
                let Some(pbin) = graph_binary(dir)? else {
                    return Err(Error::load(format!("{} has io.json but no context binary (*.bin or qnn/ctx/*.bin); build one or remove the directory",
                        dir.display()
                    )));
                };
                let pctx = QnnContext::from_binary(&pbin).map_err(e)?;
                Some(stage(&pctx, None, io, dir)?)
            }
            None => None,
        };
        return HostLoop::new(prefill, decode);
    }
    let Some(bin) = graph_binary(&export.dir)? else {
        return Err(Error::load(format!("no QNN context binary in {}: expected decode/qnn/ctx/*.bin (and prefill/...), or one DIR/*.bin holding both graphs (docs/npu_runtime.md)",
            export.dir.display()
        )));
    };
    let ctx = QnnContext::from_binary(&bin).map_err(e)?;
    let names = ctx.graph_names();
    let decode_name = if names.len() == 1 && export.prefill.is_none() {
        names[0].clone()
    } else {
        named(&names, "decode", &bin)?.to_string()
    };
    let decode = stage(&ctx, Some(&decode_name), decode_io, decode_dir)?;
    let prefill = match &export.prefill {
        Some((dir, io)) => Some(stage(&ctx, Some(named(&names, "prefill", &bin)?), io, dir)?),
        None => None,
    };
    HostLoop::new(prefill, decode)
}
