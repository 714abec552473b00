//! Cross-crate tests live in `tests/tests/`; fixtures in `tests/fixtures/`
//! (with the scripts that made them), DSL cases in `tests/dsl/`.
