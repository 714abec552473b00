//! One file per subcommand.

pub mod bench;
pub mod bench_spec;
pub mod chat;
pub mod check;
pub mod convert;
pub mod devices;
pub mod embed;
pub mod exec;
pub mod export;
pub mod graph;
pub mod inspect;
pub mod perplexity;
pub mod pull;
pub mod random_checkpoint;
pub mod run;
pub mod run_npu;
pub mod serve;
pub mod step_ops;
pub mod template;
pub mod test_backend;
pub mod tokenize;
pub mod vision_preprocess;
