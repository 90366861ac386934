//! Self-consistency of `replay` with `train`: train k steps, hand step k − 1's parameters and
//! moments to `replay`, and require step k bit for bit: `after:<param>` equals the trained
//! parameters at step k, `loss` step k's loss, `grad:<param>` train's gradients at step k.
//! A candle-nn AdamW run is replayed by the manual AdamW and must still match candle-nn's
//! trained step k. Moments come from the manual AdamW (`implementation: manual`, float64
//! factors), which equals candle-nn's bit for bit and exposes them.
//!
//! A parameter that training gives no gradient (a transformer's fused op without backward)
//! must be absent from the replay too and named in its `missing` list, with its
//! `after:<param>` recorded all the same; so must the gradients of the intermediates the
//! fused op cuts off.

mod common;

use std::collections::HashMap;

use anyhow::{Context, Result};
use candle_parity::families::transformer::{Transformer, NO_GRADIENT_FUSED};
use candle_parity::families::{cnn::Cnn, mlp::Mlp};
use candle_parity::train::Started;
use common::*;
use parity_common::candle::{CandleModel, Taps};
use parity_common::replay::{replay_names, ReplayState};
use parity_common::spec::RunSpec;
use safetensors::Dtype;
use serde_json::{json, Value};

/// What a self-consistency check leaves for further checks.
struct Replayed {
    /// Kept until the checks are done: the fixture, `spec.json` (the spec) and
    /// `state.safetensors` (step K − 1's state).
    dir: TempDir,
    spec: RunSpec,
    state: ReplayState,
    header: HashMap<String, String>,
    frame: Frame,
}

/// Trains `c` for K steps, replays step K from step K − 1's state, and asserts the replay
/// equals the trained step K bit for bit (see the module docs).
fn self_consistent(c: &Case) -> Result<Replayed> {
    let dir = TempDir::new()?;
    let fixture = write_fixture(&dir.0, c)?;
    let reference = spec(c, &fixture, &c.optimizer, false)?;
    let json = spec_json(c, &fixture, &c.optimizer, false)?;
    std::fs::write(dir.0.join("spec.json"), json.to_string())?;
    let trained = train(&reference)?;
    let before = step(&trained, K - 1);
    let wide = c.dtype == "f64";
    let write = |v: &[f64], shape: &[usize]| {
        if wide {
            raw(
                Dtype::F64,
                shape,
                v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            )
        } else {
            f32_raw(&v.iter().map(|&x| x as f32).collect::<Vec<_>>(), shape)
        }
    };
    let mut state = Vec::new();
    for p in &reference.params {
        state.push((p.name.clone(), write(before.get(&p.name), &p.shape)));
    }
    if c.optimizer["name"] == "adamw" {
        // The same run with the manual AdamW (float64 factors equal candle-nn's bit for
        // bit), which exposes the moments.
        let mut manual = c.optimizer.clone();
        if manual["implementation"] == "candle" {
            manual["implementation"] = json!("manual");
        }
        let with_moments = train(&spec(c, &fixture, &manual, true)?)?;
        let m = step(&with_moments, K - 1);
        for p in &reference.params {
            assert_eq!(
                bits(m.get(&p.name)),
                bits(before.get(&p.name)),
                "manual ≠ candle at {}",
                p.name
            );
            for prefix in ["exp_avg", "exp_avg_sq"] {
                let name = format!("{prefix}:{}", p.name);
                state.push((name.clone(), write(m.get(&name), &p.shape)));
            }
        }
    }
    let state_path = dir.0.join("state.safetensors");
    safetensors::serialize_to_file(state, None, &state_path)?;
    let state = ReplayState::from_path(&state_path, K, &reference)?;

    let mut frames = decode(&replay(&reference, &state)?)?;
    assert_eq!(frames.len(), 3);
    assert_eq!(frames[0].meta["kind"], "header");
    assert_eq!(frames[2].meta["kind"], "end");
    assert_eq!(frames[2].meta["status"], "complete");
    let frame = frames.remove(1);
    assert_eq!(frame.meta["kind"], "replay");
    assert_eq!(frame.meta["step"], K.to_string());
    let after = step(&trained, K);
    let no_grad: Vec<String> = reference
        .params
        .iter()
        .map(|p| format!("grad:{}", p.name))
        .filter(|g| !after.tensors.contains_key(g))
        .collect();
    // The intermediates a fused op cuts off come first (the contract's order), then the
    // parameters train gives no gradient.
    let forward = forward_names(&c.model);
    let cut_off: Vec<String> = forward
        .iter()
        .map(|n| format!("grad:{n}"))
        .filter(|g| !frame.tensors.contains_key(g))
        .collect();
    let missing: Vec<String> = cut_off
        .iter()
        .chain(&no_grad)
        .map(|g| format!("{g}: {NO_GRADIENT_FUSED}"))
        .collect();
    assert_eq!(frame.meta["missing"], missing.join("; "));
    if no_grad.is_empty() {
        assert!(cut_off.is_empty(), "{cut_off:?} without a fused op");
    }

    let taps: Vec<String> = forward
        .iter()
        .map(|n| n.strip_suffix(".out").unwrap().to_string())
        .collect();
    let mut want = replay_names(&taps, false, &reference.params);
    want.retain(|n| !no_grad.contains(n) && !cut_off.contains(n));
    want.sort();
    let mut got: Vec<String> = frame.tensors.keys().cloned().collect();
    got.sort();
    assert_eq!(got, want);
    let dtype = if wide { Dtype::F64 } else { Dtype::F32 };
    assert!(
        frame.tensors.values().all(|(d, _)| *d == dtype),
        "not all in the run dtype"
    );
    assert_eq!(frame.get("loss").len(), 1);

    assert_eq!(bits(frame.get("loss")), bits(after.get("loss")), "loss");
    for p in &reference.params {
        let (g, a) = (format!("grad:{}", p.name), format!("after:{}", p.name));
        if !no_grad.contains(&g) {
            assert_eq!(bits(frame.get(&g)), bits(after.get(&g)), "{g}");
        }
        assert_eq!(bits(frame.get(&a)), bits(after.get(&p.name)), "{a}");
    }
    let header = frames.remove(0).meta;
    Ok(Replayed {
        dir,
        spec: reference,
        state,
        header,
        frame,
    })
}

/// Port `M`'s forward pass (taps inactive) from the state's parameters on step K's batch,
/// and that batch's targets.
fn forward<M: CandleModel>(r: &Replayed) -> Result<(Vec<f64>, Vec<f64>)> {
    let started = Started::<M>::new(&r.spec)?;
    candle_parity::replay::set_vars(&started.net.params.0, &r.state)?;
    let (x, y) = started.data.batch(K)?;
    let flat = |t: candle_core::Tensor| -> Result<Vec<f64>> {
        Ok(t.flatten_all()?
            .to_dtype(candle_core::DType::F64)?
            .to_vec1::<f64>()?)
    };
    Ok((
        flat(started.net.forward(&x, &mut Taps::inactive())?)?,
        flat(y)?,
    ))
}

/// [`forward`] with the port of the replay's family.
fn forward_from_state(r: &Replayed) -> Result<(Vec<f64>, Vec<f64>)> {
    match r.spec.model.family.as_str() {
        "mlp" => forward::<Mlp>(r),
        "cnn1d" => forward::<Cnn>(r),
        _ => forward::<Transformer>(r),
    }
}

#[test]
fn mlp_sgd_mse_and_the_hand_checks() -> Result<()> {
    let r = self_consistent(&case(mlp(), "mse", sgd()))?;
    assert_eq!(r.header["optimizer_impl"], "candle_nn::SGD");
    assert_eq!(r.header["replay_note"], "");
    let out = r.frame.get("fc3.out");
    let (forward, y) = forward_from_state(&r)?;
    assert_eq!(bits(out), bits(&forward), "fc3.out ≠ the forward pass");
    // d mean((out − y)²) / d out = 2(out − y)/n. In float32 candle computes it as
    // (d · f32(1/n)) · 2 (mean_all is an affine by 1/n, sqr's backward is `arg·grad·2`),
    // which is bit for bit what this computes; it is also within float32 rounding of the
    // value computed in f64.
    let n = out.len();
    let grad = r.frame.get("grad:fc3.out");
    for (i, ((&o, &t), &g)) in out.iter().zip(&y).zip(grad).enumerate() {
        let in_f32 = ((o as f32 - t as f32) * (1.0 / n as f64) as f32) * 2.0;
        assert_eq!(g, in_f32 as f64, "[{i}]");
        let in_f64 = 2.0 * (o - t) / n as f64;
        assert!(
            (g - in_f64).abs() <= 1e-6 * in_f64.abs(),
            "[{i}] {g} vs {in_f64}"
        );
    }
    // relu passes no gradient where its input is not positive, and passes it unchanged
    // where it is.
    let (h, g_in, g_out) = (
        r.frame.get("fc1.out"),
        r.frame.get("grad:fc1.out"),
        r.frame.get("grad:relu1.out"),
    );
    for i in 0..h.len() {
        let want = if h[i] > 0.0 { g_out[i] } else { 0.0 };
        assert_eq!(g_in[i], want, "grad:fc1.out[{i}]");
    }
    assert!(g_in.iter().any(|&g| g != 0.0));
    Ok(())
}

#[test]
fn mlp_candle_adamw_replayed_by_the_manual_adamw_cross_entropy() -> Result<()> {
    let r = self_consistent(&case(mlp(), "cross_entropy", adamw("candle", "f64")))?;
    assert_eq!(
        r.header["optimizer_impl"],
        "candle_parity::optim::ManualAdamW"
    );
    assert!(r.header["replay_note"].contains("keeps its moments private"));
    let (forward, _) = forward_from_state(&r)?;
    assert_eq!(bits(r.frame.get("fc3.out")), bits(&forward));
    Ok(())
}

#[test]
fn mlp_manual_adamw_with_f32_factors() -> Result<()> {
    let r = self_consistent(&case(mlp(), "mse", adamw("manual", "f32")))?;
    assert_eq!(r.header["replay_note"], "");
    Ok(())
}

#[test]
fn cnn_conv1d_and_conv2d_under_candle_adamw() -> Result<()> {
    for (conv, loss) in [
        ("conv1d", "cross_entropy"),
        ("conv2d", "mse"),
        ("conv2d", "cross_entropy"),
    ] {
        let r = self_consistent(&case(cnn(conv), loss, adamw("candle", "f64")))?;
        // [batch, channels, length − kernel + 1]
        assert_eq!(r.frame.get("conv.out").len(), BATCH * 3 * 6, "{conv}");
        assert_eq!(r.frame.get("grad:relu.out").len(), BATCH * 3 * 6, "{conv}");
        let (forward, _) = forward_from_state(&r)?;
        assert_eq!(bits(r.frame.get("fc.out")), bits(&forward), "{conv}");
    }
    Ok(())
}

#[test]
fn f64_runs_replay_from_an_f64_state() -> Result<()> {
    for optimizer in [sgd(), adamw("candle", "f64")] {
        let c = Case {
            dtype: "f64",
            ..case(mlp(), "cross_entropy", optimizer)
        };
        self_consistent(&c)?;
    }
    Ok(())
}

#[test]
fn faults_are_honoured() -> Result<()> {
    let faults = [
        (json!({"kind": "transposed_weight"}), "mse", sgd()),
        (json!({"kind": "mse_sum"}), "mse", adamw("manual", "f64")),
        (
            json!({"kind": "eps_in_sqrt"}),
            "cross_entropy",
            adamw("manual", "f64"),
        ),
        (
            json!({"kind": "no_bias_correction"}),
            "mse",
            adamw("manual", "f32"),
        ),
    ];
    for (fault, loss, optimizer) in faults {
        self_consistent(&Case {
            fault,
            ..case(mlp(), loss, optimizer)
        })?;
    }
    Ok(())
}

#[test]
fn a_skipped_update_leaves_the_parameters_as_they_were() -> Result<()> {
    for optimizer in [sgd(), adamw("manual", "f64")] {
        let c = Case {
            fault: json!({"kind": "skip_update", "step": K}),
            ..case(mlp(), "mse", optimizer)
        };
        let r = self_consistent(&c)?;
        for (name, t) in &r.state.params {
            assert_not_updated(&r, name, t);
        }
    }
    Ok(())
}

#[test]
fn what_cannot_start_from_the_state_is_refused() -> Result<()> {
    let dir = TempDir::new()?;
    let c = case(mlp(), "mse", sgd());
    let fixture = write_fixture(&dir.0, &c)?;
    let replay = |optimizer: Value, moments: bool| -> Result<String> {
        let spec = spec(&c, &fixture, &optimizer, false)?;
        let zeros = |p: &parity_common::spec::ParamSpec| parity_common::replay::StateTensor {
            shape: p.shape.clone(),
            values: vec![0.0; p.shape.iter().product()],
        };
        let state = ReplayState {
            step: K,
            params: spec
                .params
                .iter()
                .map(|p| (p.name.clone(), zeros(p)))
                .collect(),
            moments: moments.then(|| parity_common::replay::Moments {
                exp_avg: spec.params.iter().map(zeros).collect(),
                exp_avg_sq: spec.params.iter().map(zeros).collect(),
                steps_taken: K - 1,
            }),
        };
        let err = replay(&spec, &state).err().context("not refused")?;
        Ok(format!("{err:#}"))
    };
    let adam = json!({"name": "adam", "lr": 0.01, "betas": [0.9, 0.999], "eps": 1e-8,
                      "weight_decay": 0.0, "implementation": "candle"});
    let err = replay(adam, true)?;
    assert!(err.contains("no Adam"), "{err}");
    assert!(replay(sgd(), true)?.contains("no moments"));
    assert!(replay(adamw("candle", "f64"), false)?.contains("needs exp_avg"));
    Ok(())
}

/// The binary's `replay` subcommand writes what `replay::run` writes, and refuses step 0.
#[test]
fn the_command_line_replays_as_the_library_does() -> Result<()> {
    let r = self_consistent(&case(mlp(), "cross_entropy", adamw("candle", "f64")))?;
    let out = r.dir.0.join("replay.frames");
    let run = |step: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_candle-parity"))
            .args(["replay", "--spec"])
            .arg(r.dir.0.join("spec.json"))
            .arg("--state")
            .arg(r.dir.0.join("state.safetensors"))
            .args(["--step", step, "--out"])
            .arg(&out)
            .output()
    };
    let done = run(&K.to_string())?;
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let frames = decode(&std::fs::read(&out)?)?;
    let kinds: Vec<&str> = frames.iter().map(|f| f.meta["kind"].as_str()).collect();
    assert_eq!(kinds, ["header", "replay", "end"]);
    assert_eq!(frames[0].meta["replay_note"], r.header["replay_note"]);
    assert_eq!(frames[1].tensors.len(), r.frame.tensors.len());
    for (name, (_, values)) in &r.frame.tensors {
        assert_eq!(bits(frames[1].get(name)), bits(values), "{name}");
    }
    let refused = run("0")?;
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("counted from 1"));
    Ok(())
}

/// The transformer replays step K bit for bit: composed ops under SGD and candle-nn's AdamW
/// (float32 and float64), and the fused negative controls, whose cut-off parameters are
/// named in `missing` and left as they were.
#[test]
fn transformer_replays_bit_for_bit() -> Result<()> {
    let composed = || transformer("composed", "generic", "erf");
    for (optimizer, dtype) in [
        (sgd(), "f32"),
        (adamw("candle", "f64"), "f32"),
        (adamw("manual", "f32"), "f32"),
        (sgd(), "f64"),
        (adamw("candle", "f64"), "f64"),
    ] {
        let r = self_consistent(&Case {
            dtype,
            ..case(composed(), "cross_entropy", optimizer)
        })?;
        assert_eq!(r.frame.meta["missing"], "", "{dtype}");
        assert_eq!(r.frame.get("head.out").len(), T_BATCH * SEQ * VOCAB);
        assert_eq!(r.frame.get("grad:head.out").len(), T_BATCH * SEQ * VOCAB);
        // 2 heads: the attention weights [B, H, T, T], the GELU's output [B, T, 4d].
        assert_eq!(
            r.frame.get("blocks.1.attn.softmax.out").len(),
            T_BATCH * 2 * SEQ * SEQ
        );
        assert_eq!(
            r.frame.get("grad:blocks.0.mlp.gelu.out").len(),
            T_BATCH * SEQ * 4 * D_MODEL
        );
        if dtype == "f32" {
            let (forward, _) = forward_from_state(&r)?;
            assert_eq!(bits(r.frame.get("head.out")), bits(&forward), "head.out");
        }
    }
    for (model, cut_off, first) in [
        // The fused softmax cuts q and k off (their parameters, outputs and the scores); the
        // fused layer norms everything but the head (34 parameters, 28 intermediates).
        (
            transformer("composed", "last_dim", "tanh"),
            6 + 6,
            "grad:blocks.0.attn.q.out",
        ),
        (
            transformer("fused", "generic", "erf"),
            34 + 28,
            "grad:tok_emb.out",
        ),
    ] {
        let r = self_consistent(&case(model, "cross_entropy", adamw("candle", "f64")))?;
        let missing = &r.frame.meta["missing"];
        assert_eq!(
            missing.matches("cut off by a fused op").count(),
            cut_off,
            "{missing}"
        );
        assert!(missing.starts_with(&format!("{first}: ")), "{missing}");
        assert!(!missing.contains("grad:head.out"), "{missing}");
        assert!(!missing.contains("grad:head.weight"), "{missing}");
        for (name, t) in &r.state.params {
            if missing.contains(&format!("grad:{name}:")) {
                assert_not_updated(&r, name, t);
            }
        }
    }
    Ok(())
}

/// The replay left parameter `name` as the state gave it: `after:<name>` equals the state's
/// (float32) values, bit for bit.
fn assert_not_updated(r: &Replayed, name: &str, state: &parity_common::replay::StateTensor) {
    let widened: Vec<f64> = state.to_f32().iter().map(|&v| v as f64).collect();
    assert_eq!(
        bits(r.frame.get(&format!("after:{name}"))),
        bits(&widened),
        "{name}"
    );
}
