//! Generates the bindings against the system's libfabric headers (found with pkg-config,
//! 1.17 or later; Debian's `libfabric-dev`) and compiles the C wrappers of its `static
//! inline` functions (`fi_write`, `fi_cq_read`, `fi_mr_reg`, …: most of the API), which
//! bindgen's `wrap_static_fns` emits, and the loader (`loader.c`) that opens libfabric at
//! run time: nothing links against libfabric (see loader.c for why). Nothing is downloaded.

use std::env;
use std::path::PathBuf;

fn main() {
    let lib = pkg_config::Config::new()
        .atleast_version("1.17")
        // Headers only: libfabric is opened at run time (loader.c), never linked.
        .cargo_metadata(false)
        .probe("libfabric")
        .unwrap_or_else(|e| {
            panic!(
                "onesided-ofi-sys: libfabric 1.17 or later not found by pkg-config \
                 (Debian: apt-get install libfabric-dev): {e}"
            )
        });
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let header = manifest.join("wrapper.h");
    println!("cargo:rerun-if-changed={}", header.display());
    let loader = manifest.join("loader.c");
    println!("cargo:rerun-if-changed={}", loader.display());
    let static_fns = out.join("static_fns");
    let mut builder = bindgen::Builder::default()
        .header(header.to_string_lossy())
        .allowlist_function("fi_.*")
        .allowlist_type("fi_.*|fid_.*")
        .allowlist_var("FI_.*")
        .wrap_static_fns(true)
        .wrap_static_fns_path(&static_fns)
        .clang_macro_fallback()
        .derive_default(true)
        .layout_tests(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    for dir in &lib.include_paths {
        builder = builder.clang_arg(format!("-I{}", dir.display()));
    }
    builder
        .generate()
        .expect("onesided-ofi-sys: bindgen failed on the libfabric headers")
        .write_to_file(out.join("bindings.rs"))
        .expect("onesided-ofi-sys: writing the bindings");
    cc::Build::new()
        .file(static_fns.with_extension("c"))
        .file(&loader)
        .include(&manifest)
        .includes(&lib.include_paths)
        .warnings(false)
        .compile("onesided_ofi_static_fns");
}
