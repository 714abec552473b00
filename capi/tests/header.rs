//! include/mllm.h is what cbindgen makes of src/ and the two enums of
//! ../embed (with cbindgen.toml): this
//! regenerates it and fails when the committed header differs. With
//! `MLLM_BLESS=1` it rewrites the header instead.

use std::path::Path;

#[test]
fn committed_header_matches_cbindgen() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(dir.join("src/lib.rs"))
        // mllm_status and mllm_stop_reason are mllm-embed's enums.
        .with_src(dir.join("../embed/src/lib.rs"))
        .generate()
        .expect("cbindgen could not generate the header");
    let mut fresh = vec![];
    bindings.write(&mut fresh);
    let fresh = String::from_utf8(fresh).expect("utf-8 header");
    let path = dir.join("include/mllm.h");
    if std::env::var_os("MLLM_BLESS").is_some() {
        std::fs::write(&path, &fresh).expect("write include/mllm.h");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == fresh,
        "capi/include/mllm.h is out of date with capi/src (the C ABI changed); \
         regenerate it with `MLLM_BLESS=1 cargo test -p mllm-capi --test header` \
         and commit it"
    );
}
