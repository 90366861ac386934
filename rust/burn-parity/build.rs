//! Embeds what the binary was built from: the locked burn version, the compiler, and the
//! source id set by the workflow's build rule (see parity_common::build_info).

fn main() {
    parity_common::build_info::emit("burn", "BURN_VERSION");
}
