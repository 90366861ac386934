//! Rebuilds parity-common whenever the workflow's build rule passes another source id
//! (`PARITY_SOURCE_ID`, the hash of the runner's sources and parity-common's own:
//! `rules/functions/build.smk`, `build_params`).
//!
//! cargo names a workspace crate's artifacts without its checkout's path and judges a path
//! crate fresh by comparing its sources' modification times with the artifact's. Two
//! checkouts sharing a target folder (CI's cache, a second clone, a worktree) can therefore
//! link one checkout's runner against the other's older parity-common, when this
//! checkout's files are older than the other's build: the runner's own build script reruns
//! on the new source id and the binary reports it, while the parity-common it links is
//! stale. Declaring the source id here makes cargo rebuild parity-common too
//! (tests/test_build.py, `test_a_second_checkout_never_links_the_first_ones_parity_common`).

fn main() {
    println!("cargo:rerun-if-env-changed=PARITY_SOURCE_ID");
}
