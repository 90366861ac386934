//! The schedules against PyTorch's own learning rates, bit for bit: `golden.json` holds what
//! torch 2.15.0 (and transformers, for the warm-up schedules) set index by index
//! (`scripts/dev/schedule_golden.py` writes it; `tests/test_loop.py` keeps it current).

use super::*;
use std::f64::consts::PI;

fn f(hex: &serde_json::Value) -> f64 {
    let h = hex.as_str().expect("hex digits");
    f64::from_bits(u64::from_str_radix(h, 16).expect("hex"))
}

#[test]
fn every_schedule_sets_pytorchs_learning_rates_bit_for_bit() {
    let golden: serde_json::Value =
        serde_json::from_str(include_str!("golden.json")).expect("golden.json");
    let base: Vec<f64> = golden["base_lrs"]
        .as_array()
        .unwrap()
        .iter()
        .map(f)
        .collect();
    let cases = golden["cases"].as_array().unwrap();
    assert!(cases.len() >= 13);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let kind: Kind = serde_json::from_value(case["kind"].clone()).expect(name);
        let cycles = matches!(
            kind,
            Kind::OneCycleLR {
                cycle_momentum: true,
                ..
            }
        );
        let mut s = Scheduler::new(&kind, &base);
        for (i, (lrs, momenta)) in case["lrs"]
            .as_array()
            .unwrap()
            .iter()
            .zip(case["momenta"].as_array().unwrap())
            .enumerate()
        {
            if i > 0 {
                s.step();
            }
            let want: Vec<f64> = lrs.as_array().unwrap().iter().map(f).collect();
            let got = s.lrs();
            assert_eq!(
                got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{name} index {i}: {got:?} vs PyTorch's {want:?}"
            );
            if cycles {
                let want: Vec<f64> = momenta.as_array().unwrap().iter().map(f).collect();
                assert_eq!(
                    s.momenta().unwrap(),
                    want.as_slice(),
                    "{name} momenta at {i}"
                );
            } else {
                assert!(s.momenta().is_none(), "{name}");
            }
        }
    }
}

#[test]
fn a_closed_form_is_not_pytorchs_recursion() {
    // Why the scheduler keeps PyTorch's state rather than computing base·(1+cos(πe/T))/2:
    // the two differ in the last bits of some float64 learning rates.
    let kind = Kind::CosineAnnealingLR {
        T_max: 100,
        eta_min: 0.0,
    };
    let mut s = Scheduler::new(&kind, &[0.1]);
    let mut differ = 0;
    for e in 1..=100 {
        s.step();
        let closed = 0.1 * (1.0 + (e as f64 * PI / 100.0).cos()) / 2.0;
        differ += usize::from(closed.to_bits() != s.lrs()[0].to_bits());
    }
    assert!(differ > 50, "{differ} of 100 differ");
}

#[test]
fn the_schedule_spec_names_pytorchs_classes() {
    let s: Schedule = serde_json::from_value(serde_json::json!({
        "order": "before",
        "kind": {"name": "get_cosine_schedule_with_warmup", "num_warmup_steps": 2,
                 "num_training_steps": 10, "num_cycles": 0.5}
    }))
    .unwrap();
    assert_eq!(s.order, Order::Before);
    let err = serde_json::from_value::<Schedule>(serde_json::json!({
        "order": "after", "kind": {"name": "StepLR", "step_size": 2, "gamma": 0.5, "extra": 1}
    }))
    .unwrap_err();
    assert!(err.to_string().contains("extra"), "{err}");
}
