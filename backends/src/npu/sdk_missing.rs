//! The vendor runtimes of a build whose `qnn` / `ascend` feature found no
//! SDK headers (build.rs sets `mllm_no_qnn_sdk` / `mllm_no_ascend_sdk`
//! and warns): the same types as the real modules, so everything above
//! them compiles, and opening one says how to build the real runtime.
//! Their values cannot exist (`Infallible`): nothing past the constructors
//! can run.

use std::convert::Infallible;
use std::path::Path;
use std::rc::Rc;

use super::{npu_err, HostData, NpuResult, PortSpec, StaticGraph};

fn missing<T>(feature: &str, var: &str, what: &str) -> NpuResult<T> {
    npu_err(format!(
        "this binary has the `{feature}` feature but was built without {what}'s headers ({var} was not set to the SDK's root at build time), so it cannot run {feature} graphs: rebuild with {var}=/path/to/sdk cargo build --release -p mllm-cli --features {feature} (docs/npu_runtime.md)"
    ))
}

/// A graph that cannot exist (see the module's comment).
pub struct NoGraph(Infallible);

impl StaticGraph for NoGraph {
    fn label(&self) -> String {
        match self.0 {}
    }

    fn run(&mut self, _: &[(&str, HostData)], _: &mut [(&str, &mut [f32])]) -> NpuResult<()> {
        match self.0 {}
    }
}

#[cfg(feature = "qnn")]
pub mod qnn {
    use super::*;

    pub type QnnGraph = NoGraph;

    /// `npu::qnn::QnnContext` without the SDK: never made.
    pub struct QnnContext(Infallible);

    impl QnnContext {
        pub fn from_binary(_: &Path) -> NpuResult<QnnContext> {
            missing("qnn", "QNN_SDK_ROOT", "the Qualcomm QNN SDK")
        }

        pub fn graph_names(&self) -> Vec<String> {
            match self.0 {}
        }

        pub fn graph(
            &self,
            _: Option<&str>,
            _: &[PortSpec],
            _: &[PortSpec],
        ) -> NpuResult<QnnGraph> {
            match self.0 {}
        }
    }
}

#[cfg(feature = "ascend")]
pub mod ascend {
    use super::*;

    pub type AclModel = NoGraph;

    /// `npu::ascend::AclRuntime` without the SDK: never made.
    pub struct AclRuntime(Infallible);

    impl AclRuntime {
        pub fn new(_: usize) -> NpuResult<Rc<AclRuntime>> {
            missing("ascend", "ASCEND_TOOLKIT_HOME", "the Ascend CANN toolkit")
        }
    }

    impl NoGraph {
        /// `npu::ascend::AclModel::load` without the SDK.
        pub fn load(
            rt: &Rc<AclRuntime>,
            _: &Path,
            _: &[PortSpec],
            _: &[PortSpec],
        ) -> NpuResult<NoGraph> {
            match rt.0 {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "qnn")]
    #[test]
    fn qnn_without_its_sdk_says_what_to_set() {
        let Err(e) = qnn::QnnContext::from_binary(Path::new("model.bin")) else {
            panic!("a context without the SDK");
        };
        assert!(
            e.0.contains("QNN_SDK_ROOT") && e.0.contains("--features qnn"),
            "{}",
            e.0
        );
    }

    #[cfg(feature = "ascend")]
    #[test]
    fn ascend_without_its_sdk_says_what_to_set() {
        let Err(e) = ascend::AclRuntime::new(0) else {
            panic!("a runtime without the SDK");
        };
        assert!(e.0.contains("ASCEND_TOOLKIT_HOME"), "{}", e.0);
    }
}
