//! Tests of the fixture store: names, aliases, buffers, refusals and the record.

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};

use super::*;
use crate::spec::RunSpec;

fn spec() -> RunSpec {
    let v = serde_json::json!({
        "experiment": "e", "run": "candle", "fixture": "fx.safetensors",
        "dtype": "f64", "device": "cpu", "steps": 1,
        "model": {"family": "own", "config": {}, "input": "tokens", "target": "tokens",
                  "tied": {"lm_head.weight": "emb.weight"},
                  "buffers": [{"name": "inv_freq", "shape": [2]}],
                  "rename": {"embedding.weight": "emb.weight"}},
        "loss": "cross_entropy",
        "optimizer": {"name": "sgd", "lr": 0.1, "momentum": 0.0, "dampening": 0.0,
                          "nesterov": false, "weight_decay": 0.0},
        "record": {"every": 1, "tensors": null, "grads": false, "moments": false},
        "params": [{"name": "emb.weight", "shape": [3, 2]}, {"name": "norm.weight", "shape": [2]}],
        "fault": {"kind": "none"}, "loop": null
    });
    RunSpec::from_json(&v.to_string()).unwrap()
}

fn tensors() -> HashMap<String, Tensor> {
    let dev = Device::Cpu;
    let t = |v: &[f32], shape: &[usize]| Tensor::new(v, &dev).unwrap().reshape(shape).unwrap();
    HashMap::from([
        (
            "emb.weight".into(),
            t(&[0.1, 0.2, 0.3, 0.4, 0.5, 0.6], &[3, 2]),
        ),
        ("norm.weight".into(), t(&[1.0, 1.0], &[2])),
        ("inv_freq".into(), t(&[1.0, 0.01], &[2])),
        ("x".into(), t(&[0.0], &[1])),
    ])
}

#[test]
fn names_resolve_through_the_rename_table_and_the_tied_aliases() -> anyhow::Result<()> {
    let store = FixtureStore::new(&spec(), &tensors(), DType::F64, &Device::Cpu, false)?;
    let vb = store.var_builder();
    let emb = vb.get((3, 2), "embedding.weight")?;
    let head = vb.pp("lm_head").get((3, 2), "weight")?;
    let buf = vb.get(2, "inv_freq")?;
    assert_eq!(emb.dtype(), DType::F64, "served in the run dtype");
    assert_eq!(
        emb.id(),
        store.params()[0].1.as_tensor().id(),
        "the Var itself"
    );
    assert_eq!(
        head.id(),
        emb.id(),
        "a tied alias is the recorded tensor's Var"
    );
    assert!(!buf.is_variable(), "a buffer is a plain tensor");
    assert_eq!(buf.to_vec1::<f64>()?, vec![1.0, 0.009999999776482582]);
    // The gradient of both uses reaches the one Var.
    let loss = (emb.sum_all()? + (head * 2.0)?.sum_all()?)?;
    let grads = loss.backward()?;
    let g = grads.get(&store.params()[0].1).unwrap();
    assert_eq!(g.flatten_all()?.to_vec1::<f64>()?, vec![3.0; 6]);
    assert!(vb.contains_tensor("lm_head.weight") && !vb.contains_tensor("x"));
    let asked = store.asked();
    assert_eq!(asked.params, vec![("emb.weight".to_string(), vec![3, 2])]);
    assert_eq!(asked.buffers, vec!["inv_freq".to_string()]);
    assert!(asked.missing.is_empty() && asked.shape_mismatch.is_empty());
    // A float32 ask of a float64 run's parameter is converted, its gradient still reaching it.
    let f32 = vb.get_with_hints_dtype(2, "norm.weight", Default::default(), DType::F32)?;
    let g = f32.sum_all()?.backward()?;
    assert!(g.get(&store.params()[1].1).is_some());
    Ok(())
}

#[test]
fn a_missing_name_or_a_wrong_shape_fails_naming_it() -> anyhow::Result<()> {
    let store = FixtureStore::new(&spec(), &tensors(), DType::F32, &Device::Cpu, false)?;
    let vb = store.var_builder();
    let err = vb.get((3, 2), "x").unwrap_err().to_string();
    assert!(err.contains("no tensor \"x\""), "{err}");
    let err = vb.get((2, 3), "emb.weight").unwrap_err().to_string();
    assert!(err.contains("[2, 3]") && err.contains("[3, 2]"), "{err}");
    let asked = store.asked();
    assert_eq!(asked.missing, vec!["x".to_string()]);
    assert_eq!(
        asked.shape_mismatch,
        vec![("emb.weight".to_string(), vec![3, 2], vec![2, 3])]
    );
    Ok(())
}

#[test]
fn a_lenient_store_serves_zeros_and_records_every_problem() -> anyhow::Result<()> {
    let store = FixtureStore::new(&spec(), &tensors(), DType::F32, &Device::Cpu, true)?;
    let vb = store.var_builder();
    let a = vb.get((4, 4), "nope.weight")?;
    let b = vb.get(5, "norm.weight")?;
    assert_eq!((a.dims(), b.dims()), (&[4, 4][..], &[5][..]));
    let asked = store.asked();
    assert_eq!(asked.missing, ["nope.weight"]);
    assert_eq!(asked.shape_mismatch[0].0, "norm.weight");
    Ok(())
}

#[test]
fn the_fixture_must_hold_every_parameter_as_float32() {
    let mut t = tensors();
    t.remove("norm.weight");
    let err = FixtureStore::new(&spec(), &t, DType::F32, &Device::Cpu, false).err();
    let err = format!("{:#}", err.expect("refused"));
    assert!(err.contains("no tensor \"norm.weight\""), "{err}");
    let mut t = tensors();
    t.insert(
        "inv_freq".into(),
        Tensor::new(&[1i64, 2], &Device::Cpu).unwrap(),
    );
    let err = FixtureStore::new(&spec(), &t, DType::F32, &Device::Cpu, false).err();
    assert!(format!("{:#}", err.expect("refused")).contains("I64"));
}
