//! Embeds what the binary was built from: the locked candle-core version, the compiler, and the
//! source id set by the workflow's build rule (see parity_common::build_info).

fn main() {
    parity_common::build_info::emit("candle-core", "CANDLE_CORE_VERSION");
}
