//! Reads the exact burn version from the workspace's Cargo.lock and the rustc version, so the
//! binary reports what it was built with (trace metadata) instead of typed-in strings.

use std::path::Path;

fn main() {
    let lock = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.lock");
    println!("cargo:rerun-if-changed={}", lock.display());
    let text = std::fs::read_to_string(&lock).unwrap_or_default();
    let mut version = String::from("unknown");
    let mut in_burn = false;
    for line in text.lines() {
        if line == "[[package]]" {
            in_burn = false;
        } else if line == "name = \"burn\"" {
            in_burn = true;
        } else if in_burn {
            if let Some(v) = line.strip_prefix("version = \"") {
                version = v.trim_end_matches('"').to_string();
                break;
            }
        }
    }
    println!("cargo:rustc-env=BURN_VERSION={version}");

    // The compiler that built this binary, for the trace's provenance.
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let rustc_version = std::process::Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=PARITY_RUSTC_VERSION={rustc_version}");
}
