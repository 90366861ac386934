//! The fixture file: a safetensors file with the initial parameters (PyTorch layout,
//! float32), the inputs `x` (float32) and the targets `y` (float32 for MSE, int64 labels for
//! cross-entropy), read into host values.

use std::collections::HashMap;

use anyhow::{bail, Context, Result};
use parity_common::spec::RunSpec;

/// The fixture's tensors as host values: float32 ones and int64 ones (class labels).
pub(crate) struct Fixture {
    pub(crate) path: String,
    pub(crate) f32s: HashMap<String, (Vec<usize>, Vec<f32>)>,
    pub(crate) i64s: HashMap<String, (Vec<usize>, Vec<i64>)>,
}

impl Fixture {
    /// Reads and parses the fixture of `spec`.
    pub(crate) fn read(spec: &RunSpec) -> Result<Fixture> {
        let path = spec.fixture.display().to_string();
        let bytes =
            std::fs::read(&spec.fixture).with_context(|| format!("reading fixture {path}"))?;
        let st = safetensors::SafeTensors::deserialize(&bytes)
            .with_context(|| format!("parsing fixture {path} as safetensors"))?;
        let mut f32s = HashMap::new();
        let mut i64s = HashMap::new();
        for (name, view) in st.tensors() {
            let shape = view.shape().to_vec();
            match view.dtype() {
                safetensors::Dtype::F32 => {
                    let v = view
                        .data()
                        .chunks_exact(4)
                        .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
                        .collect();
                    f32s.insert(name, (shape, v));
                }
                safetensors::Dtype::I64 => {
                    let v = view
                        .data()
                        .chunks_exact(8)
                        .map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes")))
                        .collect();
                    i64s.insert(name, (shape, v));
                }
                other => bail!("fixture {path}: {name} has dtype {other:?}, expected F32 or I64"),
            }
        }
        Ok(Fixture { path, f32s, i64s })
    }

    /// A float32 tensor of exactly `shape`.
    pub(crate) fn f32(&self, name: &str, shape: &[usize]) -> Result<&[f32]> {
        match self.f32s.get(name) {
            Some((s, v)) if s == shape => Ok(v),
            Some((s, _)) => bail!(
                "fixture {}: {name} is F32 {s:?}, expected F32 {shape:?}",
                self.path
            ),
            None if self.i64s.contains_key(name) => {
                bail!(
                    "fixture {}: {name} is I64, expected F32 {shape:?}",
                    self.path
                )
            }
            None => bail!("fixture {} has no tensor {name:?}", self.path),
        }
    }
}
