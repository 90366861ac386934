//! Tests of the probe contract: parsing, the checks of [`super::ProbeSpec::from_json`],
//! the names the Python side reads.

use super::*;

fn base() -> serde_json::Value {
    serde_json::json!({
        "probe": "p", "dtype": "f32", "device": "cpu",
        "inputs": [
            {"name": "x", "dtype": "float", "shape": [1, 1, 3], "values": [0.0, 1.0, 2.0], "requires_grad": false},
            {"name": "w", "dtype": "float", "shape": [1, 1, 2], "values": [1.0, -1.0], "requires_grad": true}
        ],
        "cases": [{
            "name": "a",
            "steps": [{"out": "y", "inputs": ["x", "w"],
                       "op": {"name": "conv1d", "padding": 0, "stride": 1, "dilation": 1, "groups": 1}}],
            "loss": [{"kind": "sum", "input": "y"}],
            "optimizer": null,
            "optimizer_steps": 1,
            "compare": ["loss", "y", "w.grad"]
        }]
    })
}

#[test]
fn parses_a_normalized_probe() {
    let spec = ProbeSpec::from_json(&base().to_string()).unwrap();
    assert_eq!(spec.cases[0].steps[0].op.arity(), (2, 2));
    assert!(matches!(
        spec.cases[0].steps[0].op,
        Op::Conv1d { stride: 1, .. }
    ));
    assert_eq!(
        Quantity::parse("w.grad").unwrap(),
        Quantity::Grad("w".into())
    );
}

#[test]
fn op_names_are_the_schema_names() {
    for (json, want) in [
        (r#"{"name": "broadcast_to", "shape": [2]}"#, "BroadcastTo"),
        (
            r#"{"name": "upsample_nearest1d", "size": 4}"#,
            "UpsampleNearest1d",
        ),
        (
            r#"{"name": "upsample_nearest2d", "size": [4, 4]}"#,
            "UpsampleNearest2d",
        ),
        (r#"{"name": "bce_with_logits"}"#, "BceWithLogits"),
        (
            r#"{"name": "layer_norm", "eps": 1e-5, "candle": "slow"}"#,
            "LayerNorm",
        ),
    ] {
        let op: Op = serde_json::from_str(json).unwrap();
        assert!(format!("{op:?}").starts_with(want), "{json} → {op:?}");
    }
}

#[test]
fn signed_dimensions_count_from_the_end() {
    assert_eq!(dim_index(-1, 3), Some(2));
    assert_eq!(dim_index(-3, 3), Some(0));
    assert_eq!(dim_index(2, 3), Some(2));
    assert_eq!(dim_index(3, 3), None);
    assert_eq!(dim_index(-4, 3), None);
    assert_eq!(dim_index(0, 0), None);
}

#[test]
fn statuses_are_the_python_names() {
    let m = result_meta("p", "c", "w.grad", Status::Unsupported, "why");
    assert_eq!(m["probe"], "p");
    assert_eq!(m["kind"], "result");
    assert_eq!(m["status"], "unsupported");
    assert_eq!(m["message"], "why");
    let names: Vec<_> = [
        Status::Ok,
        Status::MissingGradient,
        Status::FrameworkError,
        Status::Unsupported,
    ]
    .map(Status::name)
    .to_vec();
    assert_eq!(
        names,
        ["ok", "missing-gradient", "framework-error", "unsupported"]
    );
}

#[test]
fn unknown_argument_is_refused() {
    let mut v = base();
    v["cases"][0]["steps"][0]["op"]["paddin"] = serde_json::json!(1);
    let err = ProbeSpec::from_json(&v.to_string()).unwrap_err();
    assert!(format!("{err:#}").contains("paddin"), "{err:#}");
}

#[test]
fn undefined_names_and_quantities_are_refused() {
    let mut v = base();
    v["cases"][0]["steps"][0]["inputs"] = serde_json::json!(["x", "k"]);
    let err = ProbeSpec::from_json(&v.to_string()).unwrap_err();
    assert!(format!("{err:#}").contains("\"k\""), "{err:#}");

    let mut v = base();
    v["cases"][0]["compare"] = serde_json::json!(["x.grad"]);
    let err = ProbeSpec::from_json(&v.to_string()).unwrap_err();
    assert!(format!("{err:#}").contains("x.grad"), "{err:#}");
}

#[test]
fn non_finite_values_are_strings() {
    let mut v = base();
    v["inputs"][0]["values"] = serde_json::json!(["-inf", 1.0, "nan"]);
    let spec = ProbeSpec::from_json(&v.to_string()).unwrap();
    let x = &spec.inputs[0].values;
    assert_eq!(x[0], f64::NEG_INFINITY);
    assert!(x[2].is_nan());
    v["inputs"][0]["values"] = serde_json::json!(["-infinity", 1.0, 2.0]);
    let err = ProbeSpec::from_json(&v.to_string()).unwrap_err();
    assert!(format!("{err:#}").contains("-infinity"), "{err:#}");
}

#[test]
fn int64_inputs_hold_integers_without_gradient() {
    let mut v = base();
    v["inputs"][0]["dtype"] = serde_json::json!("int64");
    ProbeSpec::from_json(&v.to_string()).unwrap();
    v["inputs"][0]["values"] = serde_json::json!([0.0, 1.5, 2.0]);
    let err = ProbeSpec::from_json(&v.to_string()).unwrap_err();
    assert!(format!("{err:#}").contains("1.5"), "{err:#}");
    let mut v = base();
    v["inputs"][1]["dtype"] = serde_json::json!("int64");
    let err = ProbeSpec::from_json(&v.to_string()).unwrap_err();
    assert!(format!("{err:#}").contains("no gradient"), "{err:#}");
}

#[test]
fn optimizer_state_quantities_follow_the_optimizer() {
    let mut v = base();
    v["cases"][0]["optimizer"] = serde_json::json!({"name": "sgd", "lr": 0.1,
        "momentum": 0.9, "dampening": 0.0, "nesterov": false, "weight_decay": 0.0});
    v["cases"][0]["optimizer_steps"] = serde_json::json!(3);
    v["cases"][0]["compare"] = serde_json::json!(["w.after_step", "w.momentum_buffer"]);
    let spec = ProbeSpec::from_json(&v.to_string()).unwrap();
    assert_eq!(
        spec.cases[0].quantities().unwrap()[1],
        Quantity::State("w".into(), StateSlot::MomentumBuffer)
    );
    v["cases"][0]["compare"] = serde_json::json!(["w.exp_avg"]);
    let err = ProbeSpec::from_json(&v.to_string()).unwrap_err();
    assert!(format!("{err:#}").contains("w.exp_avg"), "{err:#}");
    v["cases"][0]["optimizer"] = serde_json::Value::Null;
    v["cases"][0]["compare"] = serde_json::json!(["y"]);
    let err = ProbeSpec::from_json(&v.to_string()).unwrap_err();
    assert!(format!("{err:#}").contains("optimizer_steps"), "{err:#}");
}

#[test]
fn a_batch_names_the_probe_that_cannot_run() {
    let good = base();
    let mut bad = base();
    bad["probe"] = serde_json::json!("broken");
    bad["cases"][0]["compare"] = serde_json::json!(["x.grad"]);
    let text = serde_json::json!({"probes": [good, bad]}).to_string();
    let err = ProbeBatch::from_json(&text).unwrap_err();
    assert!(format!("{err:#}").contains("\"broken\""), "{err:#}");
    let text = serde_json::json!({"probes": [base(), base()]}).to_string();
    assert_eq!(ProbeBatch::from_json(&text).unwrap().probes.len(), 2);
}

#[test]
fn new_op_names_parse_with_their_arguments() {
    for (json, want) in [
        (
            r#"{"name": "conv_transpose2d", "padding": [0, 1], "output_padding": [0, 0], "stride": [2, 1], "dilation": [1, 1], "groups": 1}"#,
            "ConvTranspose2d",
        ),
        (
            r#"{"name": "max_pool2d", "kernel": [2, 2], "stride": [2, 2], "padding": [0, 0], "dilation": [1, 2], "ceil_mode": true}"#,
            "MaxPool2d",
        ),
        (
            r#"{"name": "avg_pool1d", "kernel": 3, "stride": 2, "padding": 1, "count_include_pad": false, "ceil_mode": true}"#,
            "AvgPool1d",
        ),
        (r#"{"name": "pad", "padding": [[0, 1], [2, 0]]}"#, "Pad"),
        (r#"{"name": "sum", "dims": null, "keepdim": false}"#, "Sum"),
        (
            r#"{"name": "max", "dims": [0, -1], "keepdim": true}"#,
            "Max",
        ),
        (r#"{"name": "gelu", "approximate": "tanh"}"#, "Gelu"),
        (
            r#"{"name": "cross_entropy", "reduction": "none"}"#,
            "CrossEntropy",
        ),
        (r#"{"name": "embedding"}"#, "Embedding"),
    ] {
        let op: Op = serde_json::from_str(json).unwrap();
        assert!(format!("{op:?}").starts_with(want), "{json} → {op:?}");
    }
    let op: Op =
        serde_json::from_str(r#"{"name": "argsort", "dim": -1, "descending": true}"#).unwrap();
    assert!(op.integer_output());
    let op: Op = serde_json::from_str(r#"{"name": "embedding"}"#).unwrap();
    assert_eq!(op.integer_inputs(), &[0]);
}

#[test]
fn values_must_fill_the_shape() {
    let mut v = base();
    v["inputs"][0]["values"] = serde_json::json!([0.0, 1.0]);
    let err = ProbeSpec::from_json(&v.to_string()).unwrap_err();
    assert!(format!("{err:#}").contains("holds 3 values"), "{err:#}");
}

/// The workflow writes Python's shortest round-trip decimals (`repr`); they must parse to
/// the same binary64 value, or inputs such as 0.1·i would differ between the frameworks
/// by an ulp. Rust's `str::parse` is exact; serde_json needs its `float_roundtrip`.
#[test]
fn floats_round_trip_exactly() {
    for i in 0..20_000u32 {
        let x = f64::from(i) * 0.1 + 1e-3 * f64::from(i % 7);
        let text = format!("{x:?}");
        let parsed: f64 = serde_json::from_str(&text).unwrap();
        assert_eq!(parsed.to_bits(), x.to_bits(), "{text}");
    }
}

#[test]
fn a_panic_is_caught_as_one_line() {
    assert_eq!(catch_panic(|| 3), Ok(3));
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let caught = catch_panic(|| -> u8 { panic!("shape mismatch\n  lhs [2, 3]") });
    std::panic::set_hook(hook);
    assert_eq!(caught, Err("panic: shape mismatch lhs [2, 3]".to_string()));
}

#[test]
fn pool_size_follows_pytorch_floor_and_ceil_modes() {
    // F.max_pool1d(arange(7), 3, 2, 1, dilation=2, ceil_mode=True) has 3 outputs;
    // ones(6), kernel 3, stride 2, padding 1: 3 in floor mode, 4 in ceil mode (the last
    // window starts at 5 < 6 + 1); length 5, kernel 1, stride 3: the ceil window at 6 ≥ 5
    // is dropped, 2 either way.
    assert_eq!(pool_size(7, 3, 1, 2, 2, true), Some(3));
    assert_eq!(pool_size(6, 3, 1, 2, 1, false), Some(3));
    assert_eq!(pool_size(6, 3, 1, 2, 1, true), Some(4));
    assert_eq!(pool_size(5, 1, 0, 3, 1, true), Some(2));
    assert_eq!(pool_size(2, 3, 0, 1, 1, false), None);
}

#[test]
fn accumulation_micro_batches_and_grad_transforms_are_checked() {
    let mut v = base();
    v["inputs"][0]["shape"] = serde_json::json!([3, 1]);
    v["cases"][0] = serde_json::json!({
        "name": "a",
        "steps": [{"out": "y", "inputs": ["r", "w"], "op": {"name": "mul"}}],
        "loss": [{"kind": "sum", "input": "y"}],
        "optimizer": {"name": "sgd", "lr": 0.5, "momentum": 0.0, "dampening": 0.0,
                      "nesterov": false, "weight_decay": 0.0},
        "optimizer_steps": 1, "accumulate": 3,
        "micro_batches": [{"name": "r", "input": "x"}],
        "grad_transforms": [{"kind": "scale", "factor": 0.5},
                            {"kind": "clip_norm", "max_norm": 1.0},
                            {"kind": "replace", "input": "w", "values": [1.0, 2.0]}],
        "compare": ["loss", "r", "w.grad"]
    });
    v["inputs"][1]["shape"] = serde_json::json!([1]);
    v["inputs"][1]["values"] = serde_json::json!([1.0]);
    v["cases"][0]["grad_transforms"][2]["values"] = serde_json::json!([1.0]);
    let spec = ProbeSpec::from_json(&v.to_string()).unwrap();
    let case = &spec.cases[0];
    assert_eq!(case.accumulate, 3);
    assert_eq!(
        case.grad_transforms[0],
        GradTransform::Scale { factor: 0.5 }
    );
    assert_eq!(case.micro_batches[0].input, "x");
    // Absent, the loop keys take their defaults (a spec written before them still parses).
    let plain = ProbeSpec::from_json(&base().to_string()).unwrap();
    assert_eq!(plain.cases[0].accumulate, 1);
    assert!(plain.cases[0].micro_batches.is_empty() && plain.cases[0].grad_transforms.is_empty());
    for (edit, words) in [
        (serde_json::json!({"accumulate": 2}), "and 2 rows"),
        (serde_json::json!({"accumulate": 0}), "accumulate is 0"),
        (
            serde_json::json!({"micro_batches": [{"name": "x", "input": "x"}]}),
            "taken",
        ),
        (
            serde_json::json!({"micro_batches": [{"name": "r", "input": "w"}]}),
            "requires_grad",
        ),
        (
            serde_json::json!({"grad_transforms": [{"kind": "replace", "input": "x", "values": [1.0]}]}),
            "not an input with requires_grad",
        ),
        (
            serde_json::json!({"grad_transforms": [{"kind": "replace", "input": "w", "values": []}]}),
            "0 values for 1 elements",
        ),
        (
            serde_json::json!({"grad_transforms": [{"kind": "clip", "max_norm": 1.0}]}),
            "unknown variant",
        ),
    ] {
        let mut bad = v.clone();
        for (key, value) in edit.as_object().unwrap() {
            bad["cases"][0][key] = value.clone();
        }
        let err = ProbeSpec::from_json(&bad.to_string()).unwrap_err();
        assert!(format!("{err:#}").contains(words), "{words}: {err:#}");
    }
}
