//! Scratch folders of the burn-parity tests: each fixture (and the replay state files written
//! next to it) lives in its own folder under the system's temporary directory, removed when
//! its guard is dropped, so a `cargo test` run leaves nothing behind, a failed one included
//! (the guard is dropped while the panic unwinds).

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use parity_common::spec::RunSpec;

/// A folder `burn-parity-<tag>-<pid>-<n>` under the system's temporary directory, `n`
/// counting the folders made by this process (tests run in parallel threads), removed with
/// everything in it on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    /// Creates the folder; panics (the test fails) when it cannot be created.
    pub fn new(tag: &str) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let name = format!("burn-parity-{tag}-{}-{n}", std::process::id());
        let dir = std::env::temp_dir().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    /// The folder's path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A run spec together with the folder holding its fixture: it derefs to the spec, and the
/// folder is removed when the `Fixture` is dropped, so keep it alive while the spec is used.
pub struct Fixture {
    spec: RunSpec,
    _dir: TempDir,
}

impl Fixture {
    /// Pairs `spec` with `dir`, the folder its `fixture` lies in.
    pub fn new(spec: RunSpec, dir: TempDir) -> Self {
        assert!(
            spec.fixture.starts_with(dir.path()),
            "the fixture is in dir"
        );
        Self { spec, _dir: dir }
    }
}

impl Deref for Fixture {
    type Target = RunSpec;

    fn deref(&self) -> &RunSpec {
        &self.spec
    }
}
