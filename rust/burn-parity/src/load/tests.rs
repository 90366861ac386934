//! The loader of a port ([`super`]) on a two-module port: burn-store's
//! adapter transposes a Linear weight and finds a norm's `weight`/`bias` for `gamma`/`beta`,
//! the parameters are read back in PyTorch layout, and every missing, unused or misshapen
//! tensor is reported by name.

use std::collections::BTreeMap;

use anyhow::Result;
use burn::module::Module;
use burn::nn::{LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::{Device, TensorData};
use parity_common::burn::{BurnModel, Input, Output, Taps};
use parity_common::frames::RawTensor;
use parity_common::optim::Parameters;
use parity_common::spec::{DeviceKind, FloatType};

use super::{load_into, param_infos, remapper, Source};
use crate::device;
use crate::net::Net;

/// `first` (Linear 2 → 3) then `norm` (LayerNorm 3).
#[derive(Module, Debug)]
struct Port {
    first: Linear,
    norm: LayerNorm,
}

impl BurnModel for Port {
    fn init(_config: &serde_json::Value, device: &Device) -> Result<Self> {
        Ok(Port {
            first: LinearConfig::new(2, 3).init(device),
            norm: LayerNormConfig::new(3).init(device),
        })
    }

    fn forward(&self, x: Input, taps: &mut Taps) -> Result<Output> {
        let Input::Float2(x) = x else {
            anyhow::bail!("floats")
        };
        let h = taps.tap("first", self.first.forward(x));
        Ok(Output::Rank2(self.norm.forward(h)))
    }
}

fn source(name: &str, shape: &[usize], values: Vec<f32>) -> Source {
    Source {
        name: name.into(),
        shape: shape.to_vec(),
        values: TensorData::new(values, shape.to_vec()),
    }
}

/// PyTorch's tensors of the port under `0.weight` `[3, 2]` (0..6), `0.bias`, `1.weight`,
/// `1.bias`.
fn sources() -> Vec<Source> {
    vec![
        source("0.weight", &[3, 2], (0..6).map(|i| i as f32).collect()),
        source("0.bias", &[3], vec![10.0, 11.0, 12.0]),
        source("1.weight", &[3], vec![20.0, 21.0, 22.0]),
        source("1.bias", &[3], vec![30.0, 31.0, 32.0]),
    ]
}

fn port() -> (Port, Device) {
    let dev = device::open(DeviceKind::Cpu, FloatType::F32).unwrap();
    (Port::init(&serde_json::Value::Null, &dev).unwrap(), dev)
}

fn rename(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

fn port_remap() -> Vec<(String, String)> {
    vec![
        (r"^0\.".into(), "first.".into()),
        (r"^1\.".into(), "norm.".into()),
    ]
}

fn f32s(t: &RawTensor) -> Vec<f32> {
    assert_eq!(t.dtype, safetensors::Dtype::F32);
    t.data
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

#[test]
fn the_adapter_transposes_linear_weights_and_the_way_back_undoes_it() {
    let (mut m, _) = port();
    let remap = remapper(&BTreeMap::new(), port_remap()).unwrap();
    let loaded = load_into(&mut m, &sources(), &remap, FloatType::F32).unwrap();
    assert_eq!(loaded.missing, Vec::<String>::new());
    assert_eq!(loaded.unused, Vec::<String>::new());
    assert!(loaded.shape_mismatch.is_empty() && loaded.errors.is_empty());
    let keys: Vec<&str> = loaded.params.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["0.weight", "0.bias", "1.weight", "1.bias"]);
    let (_, w) = &loaded.params[0];
    assert_eq!((w.path.as_str(), w.linear), ("first.weight", Some((2, 3))));
    let (_, g) = &loaded.params[2];
    assert_eq!(
        (g.path.as_str(), g.torch_path.as_str()),
        ("norm.gamma", "norm.weight")
    );
    // burn holds [in, out] = the transpose of PyTorch's [out, in] rows 0 1 / 2 3 / 4 5.
    let burn_w: Vec<f32> = m
        .first
        .weight
        .val()
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    assert_eq!(burn_w, [0.0, 2.0, 4.0, 1.0, 3.0, 5.0]);
    let names: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
    let net = Net {
        params: param_infos(&loaded, &names).unwrap(),
        model: m,
    };
    let back = net.frame_params(FloatType::F32, &|_| true).unwrap();
    for ((name, t), s) in back.iter().zip(sources()) {
        assert_eq!(name, &s.name);
        assert_eq!(f32s(t), s.values.try_to_vec::<f32>().unwrap(), "{name}");
    }
}

#[test]
fn missing_unused_and_misshapen_tensors_are_named() {
    let (mut m, _) = port();
    let mut s = sources();
    s.pop(); // 1.bias
    s[0] = source("0.weight", &[2, 3], vec![0.0; 6]);
    s.push(source("2.weight", &[1], vec![0.0]));
    let remap = remapper(&BTreeMap::new(), port_remap()).unwrap();
    let loaded = load_into(&mut m, &s, &remap, FloatType::F32).unwrap();
    assert_eq!(loaded.missing, ["norm.bias"]);
    assert_eq!(loaded.unused, ["2.weight"]);
    assert_eq!(
        loaded.shape_mismatch,
        [("0.weight".to_string(), vec![2, 3], vec![3, 2])]
    );
    let why = loaded.other_problems().unwrap();
    assert!(why.contains("2.weight") && why.contains("unused"), "{why}");
}

#[test]
fn the_rename_table_maps_a_key_exactly_before_the_ports_patterns() {
    let (mut m, _) = port();
    // Without the port's patterns, only the rename table's exact keys reach the port.
    let remap = remapper(
        &rename(&[("first.weight", "0.weight"), ("first.bias", "0.bias")]),
        vec![],
    )
    .unwrap();
    let loaded = load_into(&mut m, &sources(), &remap, FloatType::F32).unwrap();
    let keys: Vec<&str> = loaded.params.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["0.weight", "0.bias"]);
    assert_eq!(loaded.missing, ["norm.weight", "norm.bias"]);
    assert_eq!(loaded.unused, ["1.bias", "1.weight"]);
    let err = remapper(&BTreeMap::new(), vec![("(".into(), "x".into())])
        .err()
        .unwrap();
    assert!(
        err.to_string().contains("not a regular expression"),
        "{err}"
    );
}
