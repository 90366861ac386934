//! Each op against hand-computed values (forward and gradient), in float64 on the CPU.
//! Where candle's result differs from PyTorch's, the test asserts what candle does and says
//! what PyTorch gives. Over 500 lines since the pooling, transposed-convolution bias and
//! indexing-write tests joined it: one test per op family, each with its hand-computed
//! values; due to be split by family (the helpers live in `super`).

use super::*;

#[test]
fn conv_transpose1d_forward_and_no_backward() {
    // Kernel [c_in 1, c_out 1, k 2] = [1, 10], stride 2: each x scatters (x, 10x).
    let conv = json!({"name": "conv_transpose1d", "padding": 0, "output_padding": 0,
                      "stride": 2, "dilation": 1, "groups": 1});
    let out = one_op(
        vec![
            input("x", &[1, 1, 3], &[1.0, 2.0, 3.0], true),
            input("w", &[1, 1, 2], &[1.0, 10.0], true),
        ],
        &["x", "w"],
        conv,
        &["y", "x.grad", "w.grad"],
    );
    assert_eq!(
        ok(&out[0]),
        (vec![1.0, 10.0, 2.0, 20.0, 3.0, 30.0], vec![1, 1, 6])
    );
    // candle 0.11 has no backward for conv-transpose1d (PyTorch: x.grad = [11, 11, 11],
    // w.grad = [6, 6]).
    assert!(
        framework_error(&out[1]).contains("conv-transpose1d"),
        "{out:?}"
    );
    assert!(matches!(out[2], Outcome::FrameworkError(_)));
}

#[test]
fn conv_transposes_add_a_bias() {
    // 1-D: y = [1, 10, 2, 20, 3, 30] + 0.5; no backward at all (the bias's neither).
    let c1 = json!({"name": "conv_transpose1d", "padding": 0, "output_padding": 0,
                    "stride": 2, "dilation": 1, "groups": 1});
    let out = one_op(
        vec![
            input("x", &[1, 1, 3], &[1.0, 2.0, 3.0], true),
            input("w", &[1, 1, 2], &[1.0, 10.0], true),
            input("b", &[1], &[0.5], true),
        ],
        &["x", "w", "b"],
        c1,
        &["y", "b.grad"],
    );
    assert_eq!(vals(&out[0]), vec![1.5, 10.5, 2.5, 20.5, 3.5, 30.5]);
    assert!(matches!(out[1], Outcome::FrameworkError(_)), "{out:?}");
    // 2-D: the bias gradient is the number of output positions (loss: sum).
    let c2 = json!({"name": "conv_transpose2d", "padding": [0, 0], "output_padding": [0, 0],
                    "stride": [1, 1], "dilation": [1, 1], "groups": 1});
    let out = one_op(
        vec![
            input("x", &[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0], true),
            input("w", &[1, 1, 2, 2], &[1.0, 0.0, 0.0, 1.0], true),
            input("b", &[1], &[-1.0], true),
        ],
        &["x", "w", "b"],
        c2,
        &["y", "x.grad", "b.grad"],
    );
    assert_eq!(
        vals(&out[0]),
        vec![0.0, 1.0, -1.0, 2.0, 4.0, 1.0, -1.0, 2.0, 3.0]
    );
    assert_eq!(vals(&out[1]), vec![2.0; 4]);
    assert_eq!(vals(&out[2]), vec![9.0]);
}

#[test]
fn conv_transpose2d_forward_and_gradients() {
    let conv = json!({"name": "conv_transpose2d", "padding": [0, 0], "output_padding": [0, 0],
                      "stride": [1, 1], "dilation": [1, 1], "groups": 1});
    let inputs = || {
        vec![
            input("x", &[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0], true),
            input("w", &[1, 1, 2, 2], &[1.0, 0.0, 0.0, 1.0], true),
        ]
    };
    let out = one_op(
        inputs(),
        &["x", "w"],
        conv.clone(),
        &["y", "x.grad", "w.grad"],
    );
    // x placed at (0, 0) plus x placed at (1, 1).
    assert_eq!(
        ok(&out[0]),
        (
            vec![1.0, 2.0, 0.0, 3.0, 5.0, 2.0, 0.0, 3.0, 4.0],
            vec![1, 1, 3, 3]
        )
    );
    assert_eq!(vals(&out[1]), vec![2.0; 4]); // Σw at every x
    assert_eq!(vals(&out[2]), vec![10.0; 4]); // Σx at every w
    let mut grouped = conv.clone();
    grouped["groups"] = json!(2);
    let out = one_op(inputs(), &["x", "w"], grouped, &["y"]);
    assert!(unsupported_message(&out[0]).contains("groups"));
    let mut uneven = conv;
    uneven["padding"] = json!([0, 1]);
    let out = one_op(inputs(), &["x", "w"], uneven, &["y"]);
    assert!(unsupported_message(&out[0]).contains("padding"));
}

#[test]
fn conv2d_with_unequal_pairs_and_max_pool1d_are_unsupported() {
    let conv = json!({"name": "conv2d", "padding": [0, 0], "stride": [1, 2],
                      "dilation": [1, 1], "groups": 1});
    let out = forward_only(
        vec![
            input("x", &[1, 1, 2, 2], &[1.0; 4], false),
            input("w", &[1, 1, 1, 1], &[1.0], false),
        ],
        &["x", "w"],
        conv,
    );
    assert!(unsupported_message(&out).contains("Tensor::conv2d takes one stride"));
    let pool = json!({"name": "max_pool1d", "kernel": 2, "stride": 2, "padding": 0,
                      "dilation": 1, "ceil_mode": false});
    let out = forward_only(vec![input("x", &[1, 1, 4], &[1.0; 4], false)], &["x"], pool);
    assert!(unsupported_message(&out).contains("no 1-D max pooling"));
}

#[test]
fn max_pool2d_gradient_is_scaled_by_the_share_of_maxima() {
    // Windows [[1, 5], [3, 4]] (max 5, alone) and [[2, 2], [2, 0]] (max 2, three times).
    let pool = json!({"name": "max_pool2d", "kernel": [2, 2], "stride": [2, 2], "padding": [0, 0],
                      "dilation": [1, 1], "ceil_mode": false});
    let x = [1.0, 5.0, 2.0, 2.0, 3.0, 4.0, 2.0, 0.0];
    let out = one_op(
        vec![input("x", &[1, 1, 2, 4], &x, true)],
        &["x"],
        pool.clone(),
        &["y", "x.grad"],
    );
    assert_eq!(ok(&out[0]), (vec![5.0, 2.0], vec![1, 1, 1, 2]));
    // candle multiplies the gradient by (number of maxima) / (window size) and gives it to
    // every maximum: 1/4 to the lone 5, 3/4 to each 2. PyTorch: 1 to the 5 and 1 to the
    // first 2, [0, 1, 1, 0, 0, 0, 0, 0].
    assert_eq!(
        vals(&out[1]),
        vec![0.0, 0.25, 0.75, 0.75, 0.0, 0.0, 0.75, 0.0]
    );
    // A stride other than the kernel: forward only.
    let mut overlapping = pool.clone();
    overlapping["stride"] = json!([1, 1]);
    let out = one_op(
        vec![input("x", &[1, 1, 2, 4], &x, true)],
        &["x"],
        overlapping,
        &["y", "x.grad"],
    );
    assert_eq!(vals(&out[0]), vec![5.0, 5.0, 2.0]);
    assert!(framework_error(&out[1]).contains("maxpool2d"), "{out:?}");
    let mut padded = pool;
    padded["padding"] = json!([1, 1]);
    let out = forward_only(vec![input("x", &[1, 1, 2, 4], &x, false)], &["x"], padded);
    assert!(unsupported_message(&out).contains("no padding argument"));
}

#[test]
fn avg_pool2d_gradient_reaches_elements_outside_every_window() {
    let pool = json!({"name": "avg_pool2d", "kernel": [2, 2], "stride": [2, 2], "padding": [0, 0],
                      "count_include_pad": false, "ceil_mode": false});
    let x: Vec<f64> = (1..=8).map(f64::from).collect();
    let out = one_op(
        vec![input("x", &[1, 1, 2, 4], &x, true)],
        &["x"],
        pool.clone(),
        &["y", "x.grad"],
    );
    assert_eq!(ok(&out[0]), (vec![3.5, 5.5], vec![1, 1, 1, 2]));
    assert_eq!(vals(&out[1]), vec![0.25; 8]);
    // Width 3, one window over the first two columns: candle's backward upsamples the
    // gradient to the whole input, so the third column gets 1/4 too (PyTorch: 0 there,
    // [0.25, 0.25, 0, 0.25, 0.25, 0]).
    let out = one_op(
        vec![input("x", &[1, 1, 2, 3], &x[..6], true)],
        &["x"],
        pool,
        &["y", "x.grad"],
    );
    assert_eq!(vals(&out[0]), vec![3.0]);
    assert_eq!(vals(&out[1]), vec![0.25; 6]);
}

#[test]
fn pool_arguments_candle_lacks_are_unsupported_where_they_change_the_result() {
    let x: Vec<f64> = (1..=10).map(f64::from).collect();
    let pool = |name: &str, extra: Value| {
        let mut p = json!({"name": name, "kernel": [2, 2], "stride": [2, 2], "padding": [0, 0],
                           "ceil_mode": false});
        for (k, v) in extra.as_object().unwrap() {
            p[k] = v.clone();
        }
        p
    };
    let run = |shape: &[usize], op: Value| {
        forward_only(
            vec![input(
                "x",
                shape,
                &x[..shape.iter().product::<usize>()],
                false,
            )],
            &["x"],
            op,
        )
    };
    let dilated = pool("max_pool2d", json!({"dilation": [1, 2]}));
    assert!(unsupported_message(&run(&[1, 1, 2, 5], dilated)).contains("no dilation argument"));
    // Width 5, kernel 2, stride 2: ceil mode adds a window starting at 4 (inside the input).
    let ceil = pool("max_pool2d", json!({"dilation": [1, 1], "ceil_mode": true}));
    assert!(unsupported_message(&run(&[1, 1, 2, 5], ceil.clone())).contains("ceil_mode"));
    // Width 4: both modes give 2 windows, so candle's floor mode is the same computation.
    assert_eq!(
        ok(&run(&[1, 1, 2, 4], ceil)),
        (vec![6.0, 8.0], vec![1, 1, 1, 2])
    );
    // Without padding count_include_pad changes nothing.
    let avg = pool("avg_pool2d", json!({"count_include_pad": false}));
    assert_eq!(
        ok(&run(&[1, 1, 2, 4], avg)),
        (vec![3.5, 5.5], vec![1, 1, 1, 2])
    );
    let avg1 = json!({"name": "avg_pool1d", "kernel": 2, "stride": 2, "padding": 0,
                      "count_include_pad": true, "ceil_mode": false});
    assert!(unsupported_message(&run(&[1, 1, 4], avg1)).contains("no 1-D average pooling"));
}

#[test]
fn pad_adds_zeros_before_and_after_each_dimension() {
    // [2, 2] padded by [[1, 0], [0, 2]] → [3, 4]; the gradient of the weighted sum is the
    // weights (1..12) at the input's places.
    let out = one_op(
        vec![
            input("x", &[2, 2], &[1.0, 2.0, 3.0, 4.0], true),
            input(
                "c",
                &[3, 4],
                &(1..=12).map(f64::from).collect::<Vec<_>>(),
                false,
            ),
        ],
        &["x"],
        json!({"name": "pad", "padding": [[1, 0], [0, 2]]}),
        &["y", "x.grad"],
    );
    assert_eq!(
        ok(&out[0]),
        (
            vec![0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 0.0, 0.0, 3.0, 4.0, 0.0, 0.0],
            vec![3, 4]
        )
    );
    assert_eq!(vals(&out[1]), vec![5.0, 6.0, 9.0, 10.0]);
}

#[test]
fn log_softmax_forward_and_gradient() {
    let ln3 = 3f64.ln();
    let out = one_op(
        vec![input("x", &[1, 2], &[0.0, ln3], true)],
        &["x"],
        json!({"name": "log_softmax", "dim": -1}),
        &["y", "x.grad"],
    );
    close(&vals(&out[0]), &[-(4f64.ln()), ln3 - 4f64.ln()], 1e-15);
    // 1 − n·softmax: softmax = [1/4, 3/4], n = 2.
    close(&vals(&out[1]), &[0.5, -0.5], 1e-15);
}

/// Forward values and gradient (loss: sum) of an element-wise op on `x`.
fn unary(op: Value, x: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let out = one_op(
        vec![input("x", &[x.len()], x, true)],
        &["x"],
        op,
        &["y", "x.grad"],
    );
    (vals(&out[0]), vals(&out[1]))
}

#[test]
fn element_wise_activations() {
    let x = [-1.0, 0.0, 2.0];
    let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
    let (y, g) = unary(json!({"name": "sigmoid"}), &x);
    close(&y, &x.map(sig), 1e-15);
    close(&g, &x.map(|v| sig(v) * (1.0 - sig(v))), 1e-15);
    let (y, g) = unary(json!({"name": "tanh"}), &x);
    close(&y, &x.map(f64::tanh), 1e-15);
    close(&g, &x.map(|v| 1.0 - v.tanh().powi(2)), 1e-15);
    let (y, g) = unary(json!({"name": "silu"}), &x);
    close(&y, &x.map(|v| v * sig(v)), 1e-15);
    close(&g, &x.map(|v| sig(v) * (1.0 + v * (1.0 - sig(v)))), 1e-15);
    // Exact GELU: Φ(−1) = 0.15865525393145707, Φ(2) = 0.9772498680518208; φ = N(0, 1) pdf.
    let phi = |v: f64| (-v * v / 2.0).exp() / (2.0 * std::f64::consts::PI).sqrt();
    let cdf = [0.15865525393145707, 0.5, 0.9772498680518208];
    let (y, g) = unary(json!({"name": "gelu", "approximate": "none"}), &x);
    close(&y, &[-cdf[0], 0.0, 2.0 * cdf[2]], 1e-12);
    // candle's backward writes 1/√(2π) as 0.398942 (PyTorch's exact gradient is
    // Φ(x) + x·φ(x): [−0.08331547058768629, 0.5, 1.085231801078197]), so even in float64 its
    // gradient is off by 1.7e-7 at x = −1 and 7.6e-8 at x = 2.
    let candle_phi = |v: f64| 0.398942 * (-v * v / 2.0).exp();
    close(
        &g,
        &[
            cdf[0] - candle_phi(-1.0),
            0.5,
            cdf[2] + 2.0 * candle_phi(2.0),
        ],
        1e-12,
    );
    close(
        &g,
        &[cdf[0] - phi(-1.0), 0.5, cdf[2] + 2.0 * phi(2.0)],
        2e-7,
    );
    let k = (2.0 / std::f64::consts::PI).sqrt();
    let u = |v: f64| k * (v + 0.044715 * v * v * v);
    let (y, g) = unary(json!({"name": "gelu", "approximate": "tanh"}), &x);
    close(&y, &x.map(|v| 0.5 * v * (1.0 + u(v).tanh())), 1e-12);
    let dgelu = |v: f64| {
        let t = u(v).tanh();
        0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * v * v)
    };
    // candle's backward uses rounded constants (0.797885, 0.0356774, 0.0535161, 0.398942 for
    // √(2/π), 0.044715·√(2/π), 3·0.044715·√(2/π)/2, √(2/π)/2): at x = −1 it gives
    // −0.08296390042637847 where the exact derivative is −0.08296408384578255.
    let candle_dgelu = |v: f64| {
        let t = (0.0356774 * v * v * v + 0.797885 * v).tanh();
        0.5 * t + (0.0535161 * v * v * v + 0.398942 * v) * (1.0 - t * t) + 0.5
    };
    close(&g, &x.map(candle_dgelu), 1e-12);
    close(&g, &x.map(dgelu), 2e-7);
    // α·(eˣ − 1) below 0; the gradient at 0 is α (the x ≤ 0 branch), as in PyTorch.
    let (y, g) = unary(json!({"name": "elu", "alpha": 2.0}), &x);
    close(&y, &[2.0 * ((-1f64).exp() - 1.0), 0.0, 2.0], 1e-15);
    close(&g, &[2.0 * (-1f64).exp(), 2.0, 1.0], 1e-15);
}

#[test]
fn exp_log_sqrt() {
    let (y, g) = unary(json!({"name": "exp"}), &[0.0, 1.0]);
    close(&y, &[1.0, std::f64::consts::E], 1e-15);
    close(&g, &[1.0, std::f64::consts::E], 1e-15);
    let (y, g) = unary(json!({"name": "log"}), &[1.0, 4.0]);
    close(&y, &[0.0, 4f64.ln()], 1e-15);
    assert_eq!(g, vec![1.0, 0.25]);
    let (y, g) = unary(json!({"name": "sqrt"}), &[1.0, 4.0]);
    assert_eq!(y, vec![1.0, 2.0]);
    assert_eq!(g, vec![0.5, 0.25]);
}

#[test]
fn sub_and_div_need_equal_shapes() {
    let ab = || {
        vec![
            input("a", &[2], &[6.0, 8.0], true),
            input("b", &[2], &[2.0, 4.0], true),
        ]
    };
    let q = ["y", "a.grad", "b.grad"];
    let out = one_op(ab(), &["a", "b"], json!({"name": "sub"}), &q);
    assert_eq!(
        [vals(&out[0]), vals(&out[1]), vals(&out[2])],
        [vec![4.0, 4.0], vec![1.0, 1.0], vec![-1.0, -1.0]]
    );
    let out = one_op(ab(), &["a", "b"], json!({"name": "div"}), &q);
    assert_eq!(
        [vals(&out[0]), vals(&out[1]), vals(&out[2])],
        [vec![3.0, 2.0], vec![0.5, 0.25], vec![-1.5, -0.5]]
    );
    let out = forward_only(
        vec![
            input("a", &[2, 1], &[1.0, 2.0], false),
            input("b", &[1, 2], &[1.0, 2.0], false),
        ],
        &["a", "b"],
        json!({"name": "div"}),
    );
    assert!(framework_error(&out).contains("shape mismatch"), "{out:?}");
}

#[test]
fn maximum_and_minimum_split_a_tie() {
    // a = b at index 1: candle gives each side half the gradient, as PyTorch does.
    let ab = || {
        vec![
            input("a", &[3], &[1.0, 2.0, 3.0], true),
            input("b", &[3], &[4.0, 2.0, 0.0], true),
        ]
    };
    let q = ["y", "a.grad", "b.grad"];
    let out = one_op(ab(), &["a", "b"], json!({"name": "maximum"}), &q);
    assert_eq!(
        [vals(&out[0]), vals(&out[1]), vals(&out[2])],
        [
            vec![4.0, 2.0, 3.0],
            vec![0.0, 0.5, 1.0],
            vec![1.0, 0.5, 0.0]
        ]
    );
    let out = one_op(ab(), &["a", "b"], json!({"name": "minimum"}), &q);
    assert_eq!(
        [vals(&out[0]), vals(&out[1]), vals(&out[2])],
        [
            vec![1.0, 2.0, 0.0],
            vec![1.0, 0.5, 0.0],
            vec![0.0, 0.5, 1.0]
        ]
    );
}

#[test]
fn rms_norm_slow_forward() {
    // x = [3, 4]: mean(x²) = 12.5; with eps 0.5 the root is √13 and y = x·w/√13 (float64:
    // the fused kernel has no float64, the probe file records it).
    let xw = vec![
        input("x", &[1, 2], &[3.0, 4.0], true),
        input("w", &[2], &[1.0, 2.0], true),
    ];
    let op = json!({"name": "rms_norm", "eps": 0.5, "candle": "slow"});
    let out = forward_only(xw, &["x", "w"], op);
    let r = 13f64.sqrt();
    close(&vals(&out), &[3.0 / r, 8.0 / r], 1e-15);
}

/// `y = op(x)` with x = 1..6 as [2, 3]: forward values, shape and gradient (loss: sum).
fn reduce(op: Value, x: &[f64]) -> (Vec<f64>, Vec<usize>, Vec<f64>) {
    let out = one_op(
        vec![input("x", &[2, 3], x, true)],
        &["x"],
        op,
        &["y", "x.grad"],
    );
    let (y, shape) = ok(&out[0]);
    (y, shape, vals(&out[1]))
}

#[test]
fn sum_and_mean_over_dimensions() {
    let x: Vec<f64> = (1..=6).map(f64::from).collect();
    let r = reduce(json!({"name": "sum", "dims": [0], "keepdim": false}), &x);
    assert_eq!(r, (vec![5.0, 7.0, 9.0], vec![3], vec![1.0; 6]));
    let r = reduce(json!({"name": "sum", "dims": [-2], "keepdim": true}), &x);
    assert_eq!((r.0, r.1), (vec![5.0, 7.0, 9.0], vec![1, 3]));
    let r = reduce(json!({"name": "sum", "dims": null, "keepdim": false}), &x);
    assert_eq!((r.0, r.1), (vec![21.0], vec![]));
    let r = reduce(json!({"name": "sum", "dims": null, "keepdim": true}), &x);
    assert_eq!((r.0, r.1), (vec![21.0], vec![1, 1]));
    let r = reduce(json!({"name": "mean", "dims": [1], "keepdim": false}), &x);
    assert_eq!(r, (vec![2.0, 5.0], vec![2], vec![1.0 / 3.0; 6]));
    let r = reduce(json!({"name": "mean", "dims": [0, 1], "keepdim": true}), &x);
    assert_eq!(r, (vec![3.5], vec![1, 1], vec![1.0 / 6.0; 6]));
}

#[test]
fn max_and_min_give_every_tie_the_whole_gradient() {
    // Rows [1, 3, 3] and [4, 0, 4]: ties in both rows.
    let x = [1.0, 3.0, 3.0, 4.0, 0.0, 4.0];
    let r = reduce(json!({"name": "max", "dims": [1], "keepdim": false}), &x);
    // PyTorch amax shares the gradient among ties: [0, 0.5, 0.5, 0.5, 0, 0.5].
    assert_eq!(
        r,
        (vec![3.0, 4.0], vec![2], vec![0.0, 1.0, 1.0, 1.0, 0.0, 1.0])
    );
    let r = reduce(json!({"name": "max", "dims": null, "keepdim": false}), &x);
    // PyTorch: [0, 0, 0, 0.5, 0, 0.5].
    assert_eq!(r, (vec![4.0], vec![], vec![0.0, 0.0, 0.0, 1.0, 0.0, 1.0]));
    let r = reduce(json!({"name": "max", "dims": [0, -1], "keepdim": true}), &x);
    assert_eq!((r.0, r.1), (vec![4.0], vec![1, 1]));
    let r = reduce(json!({"name": "min", "dims": [0], "keepdim": true}), &x);
    assert_eq!(
        r,
        (
            vec![1.0, 0.0, 3.0],
            vec![1, 3],
            vec![1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
        )
    );
}

#[test]
fn argmax_and_argmin_are_integer_outputs() {
    let x = [1.0, 3.0, 3.0, 4.0, 0.0, 4.0];
    let arg = |op: Value| -> (Vec<f64>, Vec<usize>, DType) {
        let out = forward_only(vec![input("x", &[2, 3], &x, false)], &["x"], op);
        let dt = match &out {
            Outcome::Ok(t) => t.dtype(),
            other => panic!("{other:?}"),
        };
        let (v, s) = ok(&out);
        (v, s, dt)
    };
    // The first index among ties, as in PyTorch.
    assert_eq!(
        arg(json!({"name": "argmax", "dim": 1, "keepdim": false})),
        (vec![1.0, 0.0], vec![2], DType::U32)
    );
    assert_eq!(
        arg(json!({"name": "argmax", "dim": -1, "keepdim": true})),
        (vec![1.0, 0.0], vec![2, 1], DType::U32)
    );
    assert_eq!(
        arg(json!({"name": "argmin", "dim": 0, "keepdim": false})),
        (vec![0.0, 1.0, 0.0], vec![3], DType::U32)
    );
}

#[test]
fn sort_and_argsort_along_the_last_dimension() {
    // Row 1 ties (5, 5): the CPU sort is stable (Rust's sort_by), as torch.sort(stable=True).
    let x = [3.0, 1.0, 2.0, 0.0, 5.0, 5.0];
    let c = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    let sort = |descending: bool| {
        one_op(
            vec![
                input("x", &[2, 3], &x, true),
                input("c", &[2, 3], &c, false),
            ],
            &["x"],
            json!({"name": "sort", "dim": -1, "descending": descending}),
            &["y", "x.grad"],
        )
    };
    let out = sort(false);
    assert_eq!(vals(&out[0]), vec![1.0, 2.0, 3.0, 0.0, 5.0, 5.0]);
    // Each element gets the weight of the position it is sorted to.
    assert_eq!(vals(&out[1]), vec![3.0, 1.0, 2.0, 4.0, 5.0, 6.0]);
    let out = sort(true);
    assert_eq!(vals(&out[0]), vec![3.0, 2.0, 1.0, 5.0, 5.0, 0.0]);
    assert_eq!(vals(&out[1]), vec![1.0, 3.0, 2.0, 6.0, 4.0, 5.0]);
    let argsort = |descending: bool, dim: i64| {
        forward_only(
            vec![input("x", &[2, 3], &x, false)],
            &["x"],
            json!({"name": "argsort", "dim": dim, "descending": descending}),
        )
    };
    assert_eq!(vals(&argsort(false, 1)), vec![1.0, 2.0, 0.0, 0.0, 1.0, 2.0]);
    assert_eq!(vals(&argsort(true, -1)), vec![0.0, 2.0, 1.0, 1.0, 2.0, 0.0]);
    assert!(unsupported_message(&argsort(false, 0)).contains("last dimension only"));
    // A strided view: candle's sorts refuse it.
    let steps = json!([
        {"out": "t", "inputs": ["x"], "op": {"name": "transpose", "dim0": 0, "dim1": 1}},
        {"out": "y", "inputs": ["t"], "op": {"name": "sort", "dim": -1, "descending": false}}
    ]);
    let spec = probe(
        "p",
        "f64",
        vec![input("x", &[2, 3], &x, false)],
        vec![case("c0", steps, Value::Null, &["y"])],
    );
    assert!(framework_error(&run_all(&spec)[0][0]).contains("contiguous"));
}
