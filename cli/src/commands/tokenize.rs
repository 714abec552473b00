//! `mllm tokenize --model PATH --text TEXT` (ids, comma-separated, no special
//! tokens added) and `--decode a,b,c` (text).

use crate::model_files;
use crate::CliResult;

pub fn run(model: &str, text: Option<&str>, decode: Option<&str>) -> CliResult<()> {
    let files = model_files::open_without_weights(model)?;
    let tok = files.tokenizer()?;
    if let Some(ids) = decode {
        let ids: Vec<u32> = crate::commands::exec::parse_ids(ids)
            .map_err(|e| crate::CliError::invalid(e.to_string()))?
            .into_iter()
            .map(|i| i as u32)
            .collect();
        println!("{}", tok.decode(&ids, false)?);
        return Ok(());
    }
    let text = text.unwrap_or_default();
    let ids = tok.encode(text, false)?;
    println!(
        "{}",
        ids.iter()
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    Ok(())
}
