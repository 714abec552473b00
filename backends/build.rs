//! Build script of mllm-backends: with the `qnn` or `ascend` feature, runs
//! bindgen on the vendor SDK's C headers (QNN: `$QNN_SDK_ROOT/include/QNN`;
//! AscendCL: `$ASCEND_TOOLKIT_HOME/include/acl`) into `$OUT_DIR`, keeping
//! only the items the runtimes use. Without those features it does
//! nothing, so the default build needs no SDK and no libclang. With a
//! feature but no SDK the build still succeeds, with a warning saying what
//! to set: it sets `mllm_no_qnn_sdk` / `mllm_no_ascend_sdk`, and the
//! runtime then answers `--backend qnn` with the same instructions
//! (npu/sdk_missing.rs).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-check-cfg=cfg(mllm_no_qnn_sdk)");
    println!("cargo:rustc-check-cfg=cfg(mllm_no_ascend_sdk)");
    #[cfg(feature = "qnn")]
    sdk::qnn();
    #[cfg(feature = "ascend")]
    sdk::ascend();
}

#[cfg(any(feature = "qnn", feature = "ascend"))]
mod sdk {
    use std::path::{Path, PathBuf};

    /// Stops the build with `msg` (cargo prints build-script stderr on failure).
    fn fail(msg: &str) -> ! {
        eprintln!("\nerror: {msg}\n");
        std::process::exit(1)
    }

    /// `$var` as a directory holding `header` under `include` (what the
    /// SDK installs); `None` (after a cargo warning naming what to set, and
    /// the cfg `missing_cfg`) when it is unset or lacks the header.
    fn sdk_include(
        var: &str,
        include: &str,
        header: &str,
        feature: &str,
        what: &str,
        missing_cfg: &str,
    ) -> Option<PathBuf> {
        println!("cargo:rerun-if-env-changed={var}");
        let missing = |why: String| {
            println!(
                "cargo:warning=the `{feature}` feature is built without {what}: {why}; the binary will say so when asked for --backend {feature} (set {var} to the SDK's root and rebuild for the real runtime; docs/npu_runtime.md)"
            );
            println!("cargo:rustc-cfg={missing_cfg}");
            None
        };
        let Some(root) = std::env::var_os(var) else {
            return missing(format!("{var} is not set"));
        };
        // A relative path is read from the build script's directory
        // (backends/); also try it from the directories above (the
        // workspace root, where cargo was probably run).
        let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
        let inc = std::iter::once(PathBuf::from(&root))
            .chain(manifest.ancestors().map(|a| a.join(&root)))
            .map(|r| r.join(include))
            .find(|i| i.join(header).is_file())
            .unwrap_or_else(|| Path::new(&root).join(include));
        if !inc.join(header).is_file() {
            return missing(format!(
                "{var}={} has no {include}/{header}",
                Path::new(&root).display()
            ));
        }
        println!("cargo:rerun-if-changed={}", inc.join(header).display());
        Some(inc)
    }

    fn write(b: bindgen::Builder, file: &str, feature: &str) {
        let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR")).join(file);
        match b.generate() {
            Ok(bindings) => bindings
                .write_to_file(&out)
                .unwrap_or_else(|e| fail(&format!("cannot write {}: {e}", out.display()))),
            Err(e) => fail(&format!(
                "bindgen failed on the {feature} headers ({e}); it needs libclang (set LIBCLANG_PATH to the directory holding libclang.so)"
            )),
        }
    }

    #[cfg(feature = "qnn")]
    pub fn qnn() {
        let Some(inc) = sdk_include(
            "QNN_SDK_ROOT",
            "include/QNN",
            "QnnInterface.h",
            "qnn",
            "the Qualcomm AI Engine Direct (QNN) SDK",
            "mllm_no_qnn_sdk",
        ) else {
            return;
        };
        if !inc.join("System/QnnSystemInterface.h").is_file() {
            fail(&format!(
                "{} has no System/QnnSystemInterface.h; the qnn feature needs a QNN SDK of 2.x with the System API",
                inc.display()
            ))
        }
        let b = bindgen::Builder::default()
            .header_contents(
                "mllm_qnn.h",
                // The interface tables' type names carry the headers' minor
                // version (v2_13, ...): one alias each, whatever the SDK.
                "#include \"QnnInterface.h\"\n#include \"System/QnnSystemInterface.h\"\n\
                 typedef QNN_INTERFACE_VER_TYPE MllmQnnInterfaceImpl;\n\
                 typedef QNN_SYSTEM_INTERFACE_VER_TYPE MllmQnnSystemInterfaceImpl;\n",
            )
            .clang_arg(format!("-I{}", inc.display()))
            // The two tables of entry points and the types they take.
            .allowlist_type("QnnInterface_t")
            .allowlist_type("QnnSystemInterface_t")
            .allowlist_type("MllmQnnInterfaceImpl")
            .allowlist_type("MllmQnnSystemInterfaceImpl")
            .allowlist_type("Qnn_Tensor_t")
            .allowlist_type("QnnSystemContext_BinaryInfo_t")
            .allowlist_type("QnnSystemContext_GraphInfo_t")
            .allowlist_var("QNN_SUCCESS")
            .allowlist_var("QNN_API_VERSION_MAJOR")
            .allowlist_var("QNN_SYSTEM_API_VERSION_MAJOR")
            .allowlist_var("QNN_LOG_LEVEL_.*")
            .prepend_enum_name(false)
            .derive_default(true)
            .layout_tests(false);
        write(b, "qnn_bindings.rs", "qnn");
    }

    #[cfg(feature = "ascend")]
    pub fn ascend() {
        let Some(inc) = sdk_include(
            "ASCEND_TOOLKIT_HOME",
            "include",
            "acl/acl.h",
            "ascend",
            "the Ascend CANN toolkit (AscendCL)",
            "mllm_no_ascend_sdk",
        ) else {
            return;
        };
        let mut b = bindgen::Builder::default()
            .header_contents("mllm_acl.h", "#include \"acl/acl.h\"\n")
            .clang_arg(format!("-I{}", inc.display()))
            // libascendcl.so is opened at run time: a struct of its symbols.
            .dynamic_library_name("AclLib")
            .dynamic_link_require_all(true)
            .allowlist_var("ACL_SUCCESS")
            .allowlist_var("ACL_MEMCPY_.*")
            .allowlist_var("ACL_MEM_MALLOC_HUGE_FIRST")
            .allowlist_type("aclDataType")
            .prepend_enum_name(false)
            .layout_tests(false);
        for f in [
            "aclInit",
            "aclFinalize",
            "aclGetRecentErrMsg",
            "aclrtSetDevice",
            "aclrtResetDevice",
            "aclrtMalloc",
            "aclrtFree",
            "aclrtMemcpy",
            "aclCreateDataBuffer",
            "aclDestroyDataBuffer",
            "aclmdlLoadFromFile",
            "aclmdlUnload",
            "aclmdlCreateDesc",
            "aclmdlDestroyDesc",
            "aclmdlGetDesc",
            "aclmdlGetNumInputs",
            "aclmdlGetNumOutputs",
            "aclmdlGetInputSizeByIndex",
            "aclmdlGetOutputSizeByIndex",
            "aclmdlGetInputNameByIndex",
            "aclmdlGetOutputNameByIndex",
            "aclmdlGetInputDataType",
            "aclmdlGetOutputDataType",
            "aclmdlCreateDataset",
            "aclmdlDestroyDataset",
            "aclmdlAddDatasetBuffer",
            "aclmdlExecute",
        ] {
            b = b.allowlist_function(f);
        }
        write(b, "acl_bindings.rs", "ascend");
    }
}
