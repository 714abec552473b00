//! The KV cache type scripts see through `cache.layer(i).append(k, v)`; it
//! lives in `mllm_backends::kv` so compiled graphs append to the same cache.

pub use mllm_backends::kv::KvCache;
