//! Embeds what the binary was built from: the locked burn version, the CPU backend this
//! build's features chose, the compiler, and the source id set by the workflow's build rule
//! (see parity_common::build_info).
//!
//! `BURN_BACKEND` is `ndarray` when the `ndarray` feature is on (also beside `flex`), else
//! `flex`; `BURN_RELEASE` is what the binary reports as its framework version: the burn
//! version for ndarray (`0.22.1`), with the backend as build metadata otherwise
//! (`0.22.1+flex`), the spelling of config `burn.versions`. The cfg `burn_store_0_23` marks
//! burn 0.23's burn-store API (its adapters take and give `StoreTensor`).

fn main() {
    parity_common::build_info::emit("burn", "BURN_VERSION");
    let on = |feature: &str| std::env::var_os(format!("CARGO_FEATURE_{feature}")).is_some();
    let backend = if on("NDARRAY") {
        "ndarray"
    } else if on("FLEX") {
        "flex"
    } else {
        panic!("burn-parity needs a CPU backend: build it with feature `ndarray` or `flex`")
    };
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR");
    let lock = std::path::Path::new(&manifest_dir).join("../Cargo.lock");
    let version = parity_common::build_info::lock_version(&lock, "burn");
    let release = if backend == "ndarray" {
        version.clone()
    } else {
        format!("{version}+{backend}")
    };
    println!("cargo:rustc-env=BURN_BACKEND={backend}");
    println!("cargo:rustc-env=BURN_RELEASE={release}");
    println!("cargo::rustc-check-cfg=cfg(burn_store_0_23)");
    // A staged build of a release without ndarray (parity.plan.versions) drops that feature
    // from the manifest; the code still names it in `cfg`s.
    println!("cargo::rustc-check-cfg=cfg(feature, values(\"ndarray\", \"flex\"))");
    if !version.starts_with("0.22.") {
        println!("cargo:rustc-cfg=burn_store_0_23");
    }
}
