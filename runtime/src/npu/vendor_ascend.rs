//! `--backend ascend`: the export directory's graphs as `.om` models
//! (`atc` output; `mllm_backends::npu::ascend`) on device `--device`,
//! driven by the host loop. A graph's model is `DIR/decode.om` /
//! `DIR/prefill.om`, else the one `*.om` in the graph's own directory
//! (where `--target ascend`'s README has `atc --output=model` write
//! `model.om`). Never run on a device (docs/npu_runtime.md).

use mllm_backends::npu::ascend::{AclModel, AclRuntime};

use super::{ExportDir, HostLoop, Stage};
use crate::{Error, Result};

pub fn open(export: &ExportDir, device: usize) -> Result<HostLoop> {
    let Some(decode_om) = export.artifact("decode", "om")? else {
        return Err(Error::load(format!("no decode model in {}: expected decode.om or decode/*.om (atc's output, docs/npu_runtime.md)",
            export.dir.display()
        )));
    };
    let rt = AclRuntime::new(device).map_err(|e| Error::load(e.to_string()))?;
    let (decode_dir, decode_io) = &export.decode;
    let model = AclModel::load(&rt, &decode_om, &decode_io.inputs, &decode_io.outputs)
        .map_err(|e| Error::load(e.to_string()))?;
    let decode = Stage::with_tables(Box::new(model), decode_io.clone(), decode_dir)?;
    let prefill = match &export.prefill {
        Some((dir, io)) => {
            let Some(om) = export.artifact("prefill", "om")? else {
                return Err(Error::load(format!("{} has io.json but no .om model (prefill.om or prefill/*.om); build it with atc or remove the directory",
                    dir.display()
                )));
            };
            let model = AclModel::load(&rt, &om, &io.inputs, &io.outputs)
                .map_err(|e| Error::load(e.to_string()))?;
            Some(Stage::with_tables(Box::new(model), io.clone(), dir)?)
        }
        None => None,
    };
    HostLoop::new(prefill, decode)
}
