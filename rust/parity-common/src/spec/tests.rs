//! Tests of the run spec: parsing, refusals, the recorded steps.

use super::*;

fn base() -> serde_json::Value {
    serde_json::json!({
        "experiment": "a3_adamw", "run": "candle", "fixture": "f.safetensors",
        "dtype": "f32", "device": "cpu", "steps": 3,
        "model": {"family": "mlp", "config": {"sizes": [8, 16, 4], "activation": "relu"},
                  "input": "float", "target": "float", "tied": {}, "buffers": [], "rename": {}},
        "loss": "mse",
        "optimizer": {"name": "adamw", "lr": 0.01, "betas": [0.9, 0.999], "eps": 1e-8,
                       "weight_decay": 0.01, "amsgrad": false, "implementation": "candle",
                       "bias_correction": "f64"},
        "record": {"every": 1, "tensors": null, "grads": false, "moments": false},
        "params": [{"name": "fc1.weight", "shape": [16, 8]}, {"name": "fc1.bias", "shape": [16]},
                   {"name": "fc2.weight", "shape": [4, 16]}, {"name": "fc2.bias", "shape": [4]}],
        "fault": {"kind": "none"},
        "loop": null
    })
}

#[test]
fn parses_a_full_spec() {
    let spec = RunSpec::from_json(&base().to_string()).unwrap();
    assert_eq!(spec.dtype, FloatType::F32);
    assert_eq!(spec.model.family, "mlp");
    assert_eq!(spec.model.config["sizes"][1], 16);
    assert!(!spec.model.is_own());
    assert!(spec.records_step(0) && spec.records_step(3));
}

#[test]
fn unknown_field_is_refused() {
    let mut v = base();
    v["optimizer"]["momentum"] = serde_json::json!(0.9);
    let err = RunSpec::from_json(&v.to_string()).unwrap_err();
    assert!(format!("{err:#}").contains("momentum"), "{err:#}");
}

#[test]
fn a_model_names_its_data_and_its_tensors_explicitly() {
    for key in ["config", "input", "target", "tied", "buffers", "rename"] {
        let mut v = base();
        v["model"].as_object_mut().unwrap().remove(key);
        let err = RunSpec::from_json(&v.to_string()).unwrap_err();
        assert!(format!("{err:#}").contains(key), "{key}: {err:#}");
    }
}

#[test]
fn f32_factors_need_the_manual_adamw() {
    let mut v = base();
    v["optimizer"]["bias_correction"] = serde_json::json!("f32");
    let err = RunSpec::from_json(&v.to_string()).unwrap_err();
    assert!(format!("{err:#}").contains("manual"), "{err:#}");
}

#[test]
fn burn_adamw_needs_f32_factors() {
    let mut v = base();
    v["optimizer"]["implementation"] = serde_json::json!("burn");
    let err = RunSpec::from_json(&v.to_string()).unwrap_err();
    assert!(format!("{err:#}").contains("float32 only"), "{err:#}");
    v["optimizer"]["bias_correction"] = serde_json::json!("f32");
    RunSpec::from_json(&v.to_string()).unwrap();
}

#[test]
fn the_fault_is_explicit_and_checked() {
    let mut v = base();
    v.as_object_mut().unwrap().remove("fault");
    let err = RunSpec::from_json(&v.to_string()).unwrap_err();
    assert!(format!("{err:#}").contains("fault"), "{err:#}");

    let mut v = base();
    v["fault"] = serde_json::json!({"kind": "skip_update", "step": 2});
    let spec = RunSpec::from_json(&v.to_string()).unwrap();
    assert!(spec.fault.skips(2) && !spec.fault.skips(1));
    v["fault"] = serde_json::json!({"kind": "skip_update", "step": 0});
    let err = RunSpec::from_json(&v.to_string()).unwrap_err();
    assert!(format!("{err:#}").contains("from 1"), "{err:#}");
    v["fault"] = serde_json::json!({"kind": "mse_sum", "step": 1});
    let err = RunSpec::from_json(&v.to_string()).unwrap_err();
    assert!(format!("{err:#}").contains("takes no step"), "{err:#}");
    v["fault"] = serde_json::json!({"kind": "mse_sum", "steps": 1});
    let err = RunSpec::from_json(&v.to_string()).unwrap_err();
    assert!(format!("{err:#}").contains("steps"), "{err:#}");
    v["fault"] = serde_json::json!({"kind": "skip_update"});
    let err = RunSpec::from_json(&v.to_string()).unwrap_err();
    assert!(format!("{err:#}").contains("needs its step"), "{err:#}");

    v["fault"] = serde_json::json!({"kind": "eps_in_sqrt"});
    let err = RunSpec::from_json(&v.to_string()).unwrap_err();
    assert!(format!("{err:#}").contains("manual"), "{err:#}");
    v["optimizer"]["implementation"] = serde_json::json!("manual");
    RunSpec::from_json(&v.to_string()).unwrap();

    // A fault in the forward pass reaches a built-in port through its config.
    v["fault"] = serde_json::json!({"kind": "transposed_weight"});
    let spec = RunSpec::from_json(&v.to_string()).unwrap();
    assert_eq!(
        spec.model.port_config(spec.fault)["fault"],
        "transposed_weight"
    );
    assert_eq!(spec.model.port_config(Fault::MseSum), spec.model.config);
}

#[test]
fn adam_is_explicit_and_has_no_implementation_field() {
    let mut v = base();
    v["optimizer"] = serde_json::json!({"name": "adam", "lr": 0.01, "betas": [0.9, 0.999],
                                        "eps": 1e-8, "weight_decay": 0.0, "amsgrad": false,
                                        "implementation": "recipe", "bias_correction": "f64"});
    let spec = RunSpec::from_json(&v.to_string()).unwrap();
    assert!(matches!(spec.optimizer, Optimizer::Adam { weight_decay, .. } if weight_decay == 0.0));
    v["optimizer"]["momentum"] = serde_json::json!(0.9);
    assert!(RunSpec::from_json(&v.to_string()).is_err());
    v["optimizer"] = serde_json::json!({"name": "adam", "lr": 0.01, "betas": [0.9, 0.999],
                                        "weight_decay": 0.0, "amsgrad": false,
                                        "implementation": "recipe", "bias_correction": "f64"});
    let err = RunSpec::from_json(&v.to_string()).unwrap_err();
    assert!(format!("{err:#}").contains("eps"), "{err:#}");
}

#[test]
fn record_every_thins_the_steps_but_keeps_first_and_last() {
    let mut v = base();
    v["steps"] = serde_json::json!(10);
    v["record"]["every"] = serde_json::json!(4);
    let spec = RunSpec::from_json(&v.to_string()).unwrap();
    let kept: Vec<u32> = (0..=10).filter(|&s| spec.records_step(s)).collect();
    assert_eq!(kept, vec![0, 4, 8, 10]);
}

fn own() -> serde_json::Value {
    let mut v = base();
    v["model"] = serde_json::json!({
        "family": "own", "config": {"hidden": 8, "nested": {"a": [1, 2]}},
        "input": "tokens", "target": "tokens",
        "tied": {"lm_head.weight": "model.embed_tokens.weight"},
        "buffers": [{"name": "model.rotary_emb.inv_freq", "shape": [4]}],
        "rename": {"embed.weight": "model.embed_tokens.weight"}
    });
    v["loss"] = serde_json::json!("cross_entropy");
    v["params"] = serde_json::json!([
        {"name": "model.embed_tokens.weight", "shape": [16, 8]},
        {"name": "model.norm.weight", "shape": [8]}
    ]);
    v
}

#[test]
fn an_own_model_takes_its_parameters_from_the_spec() {
    let spec = RunSpec::from_json(&own().to_string()).unwrap();
    let m = &spec.model;
    assert_eq!(
        m.port_config(spec.fault)["nested"]["a"][1],
        2,
        "the config is handed over verbatim"
    );
    assert_eq!(m.input, InputKind::Tokens);
    assert_eq!(m.tied["lm_head.weight"], "model.embed_tokens.weight");
    assert_eq!(m.buffers[0].shape, vec![4]);
    assert_eq!(m.rename["embed.weight"], "model.embed_tokens.weight");
    assert!(m.is_own());
    assert_eq!(spec.params.len(), 2);
}

#[test]
fn an_own_model_refuses_unknown_fields_and_what_does_not_fit() {
    let refused = |edit: &dyn Fn(&mut serde_json::Value), needle: &str| {
        let mut v = own();
        edit(&mut v);
        let err = RunSpec::from_json(&v.to_string()).unwrap_err();
        assert!(format!("{err:#}").contains(needle), "{needle}: {err:#}");
    };
    refused(&|v| v["model"]["vocab"] = serde_json::json!(16), "vocab");
    refused(
        &|v| v["model"]["tied"] = serde_json::json!({"lm_head.weight": "nope"}),
        "not a parameter",
    );
    refused(
        &|v| {
            v["model"]["tied"] =
                serde_json::json!({"model.norm.weight": "model.embed_tokens.weight"})
        },
        "also a parameter",
    );
    refused(
        &|v| v["model"]["rename"] = serde_json::json!({"w": "nope"}),
        "rename",
    );
    refused(
        &|v| {
            v["model"]["buffers"] = serde_json::json!([{"name": "model.norm.weight", "shape": [8]}])
        },
        "buffer",
    );
    refused(&|v| v["loss"] = serde_json::json!("mse"), "CrossEntropy");
    refused(
        &|v| v["model"]["input"] = serde_json::json!("float"),
        "token inputs",
    );
    refused(
        &|v| v["params"][1]["name"] = serde_json::json!("model.embed_tokens.weight"),
        "twice",
    );
    refused(
        &|v| v["fault"] = serde_json::json!({"kind": "transposed_weight"}),
        "only a built-in family",
    );
    // Float targets train on the MSE.
    let mut v = own();
    v["model"]["input"] = serde_json::json!("float");
    v["model"]["target"] = serde_json::json!("float");
    v["loss"] = serde_json::json!("mse");
    RunSpec::from_json(&v.to_string()).unwrap();
}
