//! Every kernel source compiles with a real NVRTC, through the same function and options the
//! GPU path loads them with ([`ordo_gpu::kernels::compile`]). NVRTC needs no GPU or driver, so
//! this runs in CI (`.ci/run` installs NVIDIA's NVRTC wheel and puts `libnvrtc.so.12` on
//! `LD_LIBRARY_PATH`): a kernel NVRTC rejects fails CI instead of first failing on a GPU machine.
//! The host type-check (`kernel_sources.rs`) sees C++ errors; only this sees CUDA's own.

#![cfg(not(ordo_loom))]

use ordo_gpu::GpuError;
use ordo_gpu::kernels::{MODULES, compile};

const NEEDS: &str = "needs the NVRTC library (libnvrtc.so.12 on LD_LIBRARY_PATH, from the \
                     nvidia-cuda-nvrtc-cu12 wheel); .ci/run installs it and runs this";

fn nvrtc_present() {
    // SAFETY: `is_culib_present` only tries to dlopen the NVRTC library; it calls no function.
    let present = unsafe { cudarc::nvrtc::sys::is_culib_present() };
    assert!(present, "NVRTC is not loadable: {NEEDS}");
}

#[test]
#[ignore = "needs the NVRTC library (libnvrtc.so.12 on LD_LIBRARY_PATH); .ci/run runs it"]
fn every_kernel_source_compiles_with_nvrtc_and_defines_its_kernels() {
    nvrtc_present();
    for (module, src, names) in MODULES {
        let ptx = match compile(module, src) {
            Ok(ptx) => ptx.to_src(),
            Err(e) => panic!("{module} does not compile with NVRTC: {e}"),
        };
        for name in names {
            assert!(ptx.contains(&format!(".entry {name}(")), "{module}: no PTX entry for {name}");
        }
    }
}

/// The check above can fail: a source NVRTC rejects comes back as `GpuError::Compile` with
/// NVRTC's log, naming the module.
#[test]
#[ignore = "needs the NVRTC library (libnvrtc.so.12 on LD_LIBRARY_PATH); .ci/run runs it"]
fn a_source_nvrtc_rejects_is_a_compile_error_with_its_log() {
    nvrtc_present();
    let broken = "extern \"C\" __global__ void k(float* x) { x[0] = undeclared_name; }";
    match compile("broken", broken) {
        Err(GpuError::Compile { module, log }) => {
            assert_eq!(module, "broken");
            assert!(log.contains("undeclared_name"), "NVRTC's log is not passed on: {log}");
        }
        Ok(_) => panic!("NVRTC accepted a source with an undeclared name"),
        Err(e) => panic!("expected a compile error, got {e}"),
    }
}
