//! Build-script helpers shared by the runners' `build.rs` (a build-dependency): the exact
//! version of a dependency from the workspace's Cargo.lock, the compiler's version, and the
//! source id the workflow's build rule passes in, so a binary reports what it was built
//! from instead of typed-in strings.

use std::path::Path;

/// Version of package `name` in the Cargo.lock at `lock` ("unknown" when absent).
pub fn lock_version(lock: &Path, name: &str) -> String {
    let text = std::fs::read_to_string(lock).unwrap_or_default();
    let wanted = format!("name = \"{name}\"");
    let mut in_package = false;
    for line in text.lines() {
        if line == "[[package]]" {
            in_package = false;
        } else if line == wanted {
            in_package = true;
        } else if in_package {
            if let Some(v) = line.strip_prefix("version = \"") {
                return v.trim_end_matches('"').to_string();
            }
        }
    }
    "unknown".into()
}

/// `rustc --version` of the compiler cargo uses (`$RUSTC`), or "unknown".
pub fn rustc_version() -> String {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    std::process::Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// Prints the cargo directives of a runner's build script: `<version_env>` = the locked
/// version of `dependency` in the workspace's Cargo.lock, `PARITY_RUSTC_VERSION`, and
/// `PARITY_SOURCE_ID` (the hash of the runner's sources the build rule sets; "unknown" for a
/// plain `cargo build`). Rebuilds when the lock file or the source id changes.
///
/// The crate's directory is read from `CARGO_MANIFEST_DIR` when the build script *runs*, not
/// when it was compiled: cargo reuses a compiled build script across checkouts that share a
/// target directory, so a path baked in at compile time would name another (possibly deleted)
/// checkout's Cargo.lock.
///
/// # Panics
/// When cargo did not set `CARGO_MANIFEST_DIR` (not run as a build script).
pub fn emit(dependency: &str, version_env: &str) {
    let manifest_dir =
        std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR (run by cargo)");
    let lock = Path::new(&manifest_dir).join("../Cargo.lock");
    println!("cargo:rerun-if-changed={}", lock.display());
    println!("cargo:rerun-if-env-changed=PARITY_SOURCE_ID");
    println!(
        "cargo:rustc-env={version_env}={}",
        lock_version(&lock, dependency)
    );
    println!("cargo:rustc-env=PARITY_RUSTC_VERSION={}", rustc_version());
    let id = std::env::var("PARITY_SOURCE_ID").unwrap_or_else(|_| "unknown".into());
    println!("cargo:rustc-env=PARITY_SOURCE_ID={id}");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A folder under the system's temporary directory, removed on drop (so also when an
    /// assertion fails).
    struct TempDir(std::path::PathBuf);

    impl TempDir {
        fn new() -> Self {
            let dir = std::env::temp_dir().join(format!("parity-lock-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            Self(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn reads_the_locked_version_of_a_package() {
        let dir = TempDir::new();
        let lock = dir.0.join("Cargo.lock");
        std::fs::write(
            &lock,
            "[[package]]\nname = \"a\"\nversion = \"1.0.0\"\n\n[[package]]\nname = \"candle-core\"\nversion = \"0.11.0\"\n",
        )
        .unwrap();
        assert_eq!(lock_version(&lock, "candle-core"), "0.11.0");
        assert_eq!(lock_version(&lock, "burn"), "unknown");
    }
}
