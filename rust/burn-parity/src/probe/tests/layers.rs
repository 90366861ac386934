//! Convolutions, pooling and element-wise ops.

use serde_json::json;

use super::*;

#[test]
fn probe_conv_transpose() {
    let ct1 = |stride: usize, output_padding: usize| {
        json!({"name": "conv_transpose1d", "padding": 0, "output_padding": output_padding,
               "stride": stride, "dilation": 1, "groups": 1})
    };
    let ct2 = |padding: usize| {
        json!({"name": "conv_transpose2d", "padding": [padding, padding],
               "output_padding": [0, 0], "stride": [1, 1], "dilation": [1, 1], "groups": 1})
    };
    let s = spec(
        vec![
            input("x", &[1, 1, 3], &[1.0, 2.0, 3.0], true),
            input("w", &[1, 1, 2], &[1.0, -1.0], true),
            input("c", &[1, 1, 6], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], false),
            input("a", &[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0], true),
            input("k", &[1, 1, 2, 2], &[1.0, 0.0, 0.0, 1.0], true),
            input("bias", &[1], &[-1.0], true),
        ],
        vec![
            json!({"name": "1d", "steps": [step("y", &["x", "w"], ct1(2, 0))],
                "loss": [{"kind": "weighted_sum", "input": "y", "weights": "c"}],
                "optimizer": null, "optimizer_steps": 1,
                "compare": ["y", "loss", "x.grad", "w.grad"]}),
            case(
                "1d_output_padding",
                vec![step("y", &["x", "w"], ct1(2, 1))],
                "",
                &["y"],
            ),
            case(
                "2d",
                vec![step("y", &["a", "k"], ct2(0))],
                "y",
                &["y", "a.grad", "k.grad"],
            ),
            case(
                "2d_padded",
                vec![step("y", &["a", "k"], ct2(1))],
                "",
                &["y"],
            ),
            case(
                "2d_bias",
                vec![step("y", &["a", "k", "bias"], ct2(0))],
                "y",
                &["y", "bias.grad", "k.grad"],
            ),
            case(
                "1d_bias",
                vec![step("y", &["x", "w", "bias"], ct1(2, 0))],
                "y",
                &["y", "bias.grad"],
            ),
        ],
    );
    let out = run_all(&s);
    // y[2i + k] = x[i]·w[k]; dL/dx[i] = c[2i] − c[2i+1]; dL/dw[k] = Σ x[i]·c[2i + k].
    assert_eq!(
        values(&out[0][0], &[1, 1, 6]),
        [1.0, -1.0, 2.0, -2.0, 3.0, -3.0]
    );
    assert_eq!(values(&out[0][1], &[1]), [-6.0]);
    assert_eq!(values(&out[0][2], &[1, 1, 3]), [-1.0, -1.0, -1.0]);
    assert_eq!(values(&out[0][3], &[1, 1, 2]), [22.0, 28.0]);
    assert_eq!(
        values(&out[1][0], &[1, 1, 7]),
        [1.0, -1.0, 2.0, -2.0, 3.0, -3.0, 0.0]
    );
    // a placed at (0, 0) plus a placed at (1, 1).
    assert_eq!(
        values(&out[2][0], &[1, 1, 3, 3]),
        [1.0, 2.0, 0.0, 3.0, 5.0, 2.0, 0.0, 3.0, 4.0]
    );
    assert_eq!(values(&out[2][1], &[1, 1, 2, 2]), [2.0; 4]);
    assert_eq!(values(&out[2][2], &[1, 1, 2, 2]), [10.0; 4]);
    assert_eq!(values(&out[3][0], &[1, 1, 1, 1]), [5.0]);
    // The bias −1 on every output position; its gradient counts them (loss: sum).
    assert_eq!(
        values(&out[4][0], &[1, 1, 3, 3]),
        [0.0, 1.0, -1.0, 2.0, 4.0, 1.0, -1.0, 2.0, 3.0]
    );
    assert_eq!(values(&out[4][1], &[1]), [9.0]);
    assert_eq!(values(&out[4][2], &[1, 1, 2, 2]), [10.0; 4]);
    assert_eq!(
        values(&out[5][0], &[1, 1, 6]),
        [0.0, -2.0, 1.0, -3.0, 2.0, -4.0]
    );
    assert_eq!(values(&out[5][1], &[1]), [6.0]);
}

#[test]
fn probe_pooling() {
    let mp1 = |padding: usize| {
        json!({"name": "max_pool1d", "kernel": 2, "stride": 2, "padding": padding,
                                      "dilation": 1, "ceil_mode": false})
    };
    let s = spec(
        vec![
            input("x", &[1, 1, 5], &[1.0, 3.0, 2.0, 5.0, 4.0], true),
            input("m", &[1, 1, 2, 2], &[1.0, 4.0, 3.0, 2.0], true),
            input("a", &[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0], true),
        ],
        vec![
            case(
                "mp1",
                vec![step("y", &["x"], mp1(0))],
                "y",
                &["y", "x.grad"],
            ),
            case(
                "mp1_pad",
                vec![step("y", &["x"], mp1(1))],
                "y",
                &["y", "x.grad"],
            ),
            case(
                "mp2",
                vec![step(
                    "y",
                    &["m"],
                    json!({"name": "max_pool2d", "kernel": [2, 2],
                    "stride": [2, 2], "padding": [0, 0], "dilation": [1, 1], "ceil_mode": false}),
                )],
                "y",
                &["y", "m.grad"],
            ),
            case(
                "avg2",
                vec![step(
                    "y",
                    &["a"],
                    json!({"name": "avg_pool2d", "kernel": [2, 2],
                    "stride": [1, 1], "padding": [1, 1], "count_include_pad": true,
                    "ceil_mode": false}),
                )],
                "y",
                &["y", "a.grad"],
            ),
        ],
    );
    let out = run_all(&s);
    assert_eq!(values(&out[0][0], &[1, 1, 2]), [3.0, 5.0]);
    assert_eq!(values(&out[0][1], &[1, 1, 5]), [0.0, 1.0, 0.0, 1.0, 0.0]);
    // Windows [−∞, 1], [3, 2], [5, 4].
    assert_eq!(values(&out[1][0], &[1, 1, 3]), [1.0, 3.0, 5.0]);
    assert_eq!(values(&out[1][1], &[1, 1, 5]), [1.0, 1.0, 0.0, 1.0, 0.0]);
    assert_eq!(values(&out[2][0], &[1, 1, 1, 1]), [4.0]);
    assert_eq!(values(&out[2][1], &[1, 1, 2, 2]), [0.0, 1.0, 0.0, 0.0]);
    // Padding zeros count: every window sum over 4.
    assert_eq!(
        values(&out[3][0], &[1, 1, 3, 3]),
        [0.25, 0.75, 0.5, 1.0, 2.5, 1.5, 0.75, 1.75, 1.0]
    );
    assert_eq!(values(&out[3][1], &[1, 1, 2, 2]), [1.0; 4]);
}

#[test]
fn probe_elementwise() {
    let un = |name: &str| json!({ "name": name });
    let s = spec(
        vec![
            input("x", &[3], &[-1.0, 0.0, 2.0], true),
            input("g", &[3], &[-2.0, 0.0, 2.0], true),
            input("p", &[3], &[1.0, 4.0, 9.0], true),
            input("a", &[2], &[6.0, 8.0], true),
            input("b", &[2], &[2.0, 4.0], true),
        ],
        vec![
            case(
                "sigmoid",
                vec![step("y", &["x"], un("sigmoid"))],
                "y",
                &["y", "x.grad"],
            ),
            case(
                "tanh",
                vec![step("y", &["x"], un("tanh"))],
                "y",
                &["y", "x.grad"],
            ),
            case(
                "silu",
                vec![step("y", &["x"], un("silu"))],
                "y",
                &["y", "x.grad"],
            ),
            case(
                "gelu",
                vec![step(
                    "y",
                    &["g"],
                    json!({"name": "gelu", "approximate": "none"}),
                )],
                "y",
                &["y", "g.grad"],
            ),
            case(
                "gelu_tanh",
                vec![step(
                    "y",
                    &["g"],
                    json!({"name": "gelu", "approximate": "tanh"}),
                )],
                "y",
                &["y", "g.grad"],
            ),
            case(
                "elu",
                vec![step("y", &["x"], json!({"name": "elu", "alpha": 2.0}))],
                "y",
                &["y", "x.grad"],
            ),
            case(
                "exp",
                vec![step("y", &["x"], un("exp"))],
                "y",
                &["y", "x.grad"],
            ),
            case(
                "log",
                vec![step("y", &["p"], un("log"))],
                "y",
                &["y", "p.grad"],
            ),
            case(
                "sqrt",
                vec![step("y", &["p"], un("sqrt"))],
                "y",
                &["y", "p.grad"],
            ),
            case(
                "sub",
                vec![step("y", &["a", "b"], un("sub"))],
                "y",
                &["y", "a.grad", "b.grad"],
            ),
            case(
                "div",
                vec![step("y", &["a", "b"], un("div"))],
                "y",
                &["y", "a.grad", "b.grad"],
            ),
            case(
                "log_softmax",
                vec![step("y", &["x"], json!({"name": "log_softmax", "dim": -1}))],
                "y",
                &["y", "x.grad"],
            ),
            case(
                "sub_unequal",
                vec![step("y", &["a", "x"], un("sub"))],
                "",
                &["y"],
            ),
            case(
                "maximum",
                vec![step("y", &["a", "b"], un("maximum"))],
                "y",
                &["y", "a.grad", "b.grad"],
            ),
            case(
                "minimum",
                vec![step("y", &["a", "b"], un("minimum"))],
                "y",
                &["y", "a.grad", "b.grad"],
            ),
        ],
    );
    let out = run_all(&s);
    let xs = [-1.0f64, 0.0, 2.0];
    let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
    let map = |f: &dyn Fn(f64) -> f64| xs.iter().map(|&v| f(v)).collect::<Vec<_>>();
    close(&values(&out[0][0], &[3]), &map(&sig));
    close(
        &values(&out[0][1], &[3]),
        &map(&|v| sig(v) * (1.0 - sig(v))),
    );
    close(&values(&out[1][0], &[3]), &map(&f64::tanh));
    close(&values(&out[1][1], &[3]), &map(&|v| 1.0 - v.tanh().powi(2)));
    close(&values(&out[2][0], &[3]), &map(&|v| v * sig(v)));
    close(
        &values(&out[2][1], &[3]),
        &map(&|v| sig(v) * (1.0 + v * (1.0 - sig(v)))),
    );
    // Both GELU forms: f(x) − f(−x) = x, f(0) = 0, f′(x) + f′(−x) = 1, f′(0) = 1/2.
    for o in &out[3..5] {
        let (y, g) = (values(&o[0], &[3]), values(&o[1], &[3]));
        close(
            &[y[2] - y[0], y[1], g[0] + g[2], g[1]],
            &[2.0, 0.0, 1.0, 0.5],
        );
    }
    let e = (-1.0f64).exp();
    close(&values(&out[5][0], &[3]), &[2.0 * (e - 1.0), 0.0, 2.0]);
    // At 0 the negative branch (x ≤ 0), as PyTorch: α·e⁰.
    close(&values(&out[5][1], &[3]), &[2.0 * e, 2.0, 1.0]);
    close(&values(&out[6][0], &[3]), &map(&f64::exp));
    close(&values(&out[6][1], &[3]), &map(&f64::exp));
    close(&values(&out[7][0], &[3]), &[0.0, 4f64.ln(), 9f64.ln()]);
    close(&values(&out[7][1], &[3]), &[1.0, 0.25, 1.0 / 9.0]);
    assert_eq!(values(&out[8][0], &[3]), [1.0, 2.0, 3.0]);
    close(&values(&out[8][1], &[3]), &[0.5, 0.25, 1.0 / 6.0]);
    assert_eq!(values(&out[9][0], &[2]), [4.0, 4.0]);
    assert_eq!(values(&out[9][1], &[2]), [1.0, 1.0]);
    assert_eq!(values(&out[9][2], &[2]), [-1.0, -1.0]);
    assert_eq!(values(&out[10][0], &[2]), [3.0, 2.0]);
    assert_eq!(values(&out[10][1], &[2]), [0.5, 0.25]);
    assert_eq!(values(&out[10][2], &[2]), [-1.5, -0.5]);
    let lse = xs.iter().map(|v| v.exp()).sum::<f64>().ln();
    close(&values(&out[11][0], &[3]), &map(&|v| v - lse));
    // d/dx Σ log_softmax = 1 − 3·softmax.
    close(
        &values(&out[11][1], &[3]),
        &map(&|v| 1.0 - 3.0 * (v - lse).exp()),
    );
    assert!(
        matches!(&out[12][0], Outcome::FrameworkError(m) if m.contains("differ")),
        "{:?}",
        out[12][0]
    );
    // a > b everywhere (ties: the elementwise probe file): the larger side takes it all.
    assert_eq!(values(&out[13][0], &[2]), [6.0, 8.0]);
    assert_eq!(values(&out[13][1], &[2]), [1.0, 1.0]);
    assert_eq!(values(&out[13][2], &[2]), [0.0, 0.0]);
    assert_eq!(values(&out[14][0], &[2]), [2.0, 4.0]);
    assert_eq!(values(&out[14][1], &[2]), [0.0, 0.0]);
    assert_eq!(values(&out[14][2], &[2]), [1.0, 1.0]);
}

#[test]
fn probe_pool_arguments_and_pad() {
    let avg1 = |count_include_pad: bool| {
        json!({"name": "avg_pool1d", "kernel": 3, "stride": 2, "padding": 1,
               "count_include_pad": count_include_pad, "ceil_mode": true})
    };
    let s = spec(
        vec![
            input("x", &[1, 1, 5], &[1.0, 3.0, 2.0, 5.0, 4.0], true),
            input("z", &[1, 1, 6], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], true),
            input("a", &[1, 2], &[1.0, 2.0], true),
        ],
        vec![
            case(
                "dilated",
                vec![step(
                    "y",
                    &["x"],
                    json!({"name": "max_pool1d", "kernel": 2, "stride": 1, "padding": 0,
                           "dilation": 2, "ceil_mode": false}),
                )],
                "y",
                &["y", "x.grad"],
            ),
            case("ceil_pad", vec![step("y", &["z"], avg1(true))], "y", &["y"]),
            case(
                "ceil_nopad",
                vec![step("y", &["z"], avg1(false))],
                "y",
                &["y"],
            ),
            case(
                "pad",
                vec![step(
                    "y",
                    &["a"],
                    json!({"name": "pad", "padding": [[0, 1], [2, 0]]}),
                )],
                "y",
                &["y", "a.grad"],
            ),
        ],
    );
    let out = run_all(&s);
    // Windows (0, 2), (1, 3), (2, 4): PyTorch's [2, 5, 4] and gradient [0, 0, 1, 1, 1].
    assert_eq!(values(&out[0][0], &[1, 1, 3]), [2.0, 5.0, 4.0]);
    assert_eq!(values(&out[0][1], &[1, 1, 5]), [0.0, 0.0, 1.0, 1.0, 1.0]);
    // Ceil mode adds a window starting at 5: [6, pad, past the end]. Its divisor is 2 with
    // the padding counted (the window clipped to the padded input), 1 without (PyTorch
    // 2.15: [1, 3, 5, 3] and [1.5, 3, 5, 6]).
    assert_eq!(values(&out[1][0], &[1, 1, 4]), [1.0, 3.0, 5.0, 3.0]);
    assert_eq!(values(&out[2][0], &[1, 1, 4]), [1.5, 3.0, 5.0, 6.0]);
    assert_eq!(
        values(&out[3][0], &[2, 4]),
        [0.0, 0.0, 1.0, 2.0, 0.0, 0.0, 0.0, 0.0]
    );
    assert_eq!(values(&out[3][1], &[1, 2]), [1.0, 1.0]);
}
