//! Indexing ops with int64 indices and the losses, against hand-computed values (float64,
//! CPU).

use super::*;

#[test]
fn embedding_index_select_and_gather_take_int64_indices() {
    let w: Vec<f64> = (1..=6).map(f64::from).collect();
    let out = one_op(
        vec![
            int_input("i", &[3], &[2.0, 0.0, 2.0]),
            input("w", &[3, 2], &w, true),
        ],
        &["i", "w"],
        json!({"name": "embedding"}),
        &["y", "w.grad"],
    );
    assert_eq!(
        ok(&out[0]),
        (vec![5.0, 6.0, 1.0, 2.0, 5.0, 6.0], vec![3, 2])
    );
    // A repeated index adds its gradients.
    assert_eq!(vals(&out[1]), vec![1.0, 1.0, 0.0, 0.0, 2.0, 2.0]);
    let out = one_op(
        vec![
            input("x", &[2, 3], &w, true),
            int_input("i", &[3], &[2.0, 0.0, 2.0]),
        ],
        &["x", "i"],
        json!({"name": "index_select", "dim": 1}),
        &["y", "x.grad"],
    );
    assert_eq!(
        ok(&out[0]),
        (vec![3.0, 1.0, 3.0, 6.0, 4.0, 6.0], vec![2, 3])
    );
    assert_eq!(vals(&out[1]), vec![1.0, 0.0, 2.0, 1.0, 0.0, 2.0]);
    let out = one_op(
        vec![
            input("x", &[2, 3], &w, true),
            int_input("i", &[2, 2], &[0.0, 0.0, 2.0, 1.0]),
        ],
        &["x", "i"],
        json!({"name": "gather", "dim": 1}),
        &["y", "x.grad"],
    );
    assert_eq!(ok(&out[0]), (vec![1.0, 1.0, 6.0, 5.0], vec![2, 2]));
    assert_eq!(vals(&out[1]), vec![2.0, 0.0, 0.0, 0.0, 1.0, 1.0]);
}

#[test]
fn losses_with_mean_reduction() {
    let ln = f64::ln;
    let ce = |reduction: &str| {
        one_op(
            vec![
                input("z", &[2, 2], &[0.0, ln(3.0), 0.0, 0.0], true),
                int_input("t", &[2], &[1.0, 0.0]),
            ],
            &["z", "t"],
            json!({"name": "cross_entropy", "reduction": reduction}),
            &["y", "z.grad"],
        )
    };
    let out = ce("mean");
    let (y, shape) = ok(&out[0]);
    assert_eq!(shape, Vec::<usize>::new());
    close(&y, &[(ln(4.0 / 3.0) + ln(2.0)) / 2.0], 1e-15);
    // (softmax − one-hot) / n.
    close(&vals(&out[1]), &[0.125, -0.125, -0.25, 0.25], 1e-15);
    assert!(unsupported_message(&ce("sum")[0]).contains("cross_entropy returns the mean only"));
    assert!(unsupported_message(&ce("none")[1]).contains("reduction none"));

    let logp: Vec<f64> = (1..=6).map(f64::from).collect();
    let out = one_op(
        vec![
            input("p", &[2, 3], &logp, true),
            int_input("t", &[2], &[2.0, 0.0]),
        ],
        &["p", "t"],
        json!({"name": "nll", "reduction": "mean"}),
        &["y", "p.grad"],
    );
    assert_eq!(vals(&out[0]), vec![-3.5]);
    assert_eq!(vals(&out[1]), vec![0.0, 0.0, -0.5, -0.5, 0.0, 0.0]);

    let mse = |reduction: &str| {
        one_op(
            vec![
                input("a", &[3], &[1.0, 2.0, 3.0], true),
                input("b", &[3], &[1.0, 4.0, 0.0], false),
            ],
            &["a", "b"],
            json!({"name": "mse", "reduction": reduction}),
            &["y", "a.grad"],
        )
    };
    let out = mse("mean");
    close(&vals(&out[0]), &[13.0 / 3.0], 1e-15);
    close(&vals(&out[1]), &[0.0, -4.0 / 3.0, 2.0], 1e-15);
    assert!(unsupported_message(&mse("sum")[0]).contains("mse"));
}

#[test]
fn indexing_writes_and_the_swapped_scatter_backward() {
    let x: Vec<f64> = (1..=6).map(f64::from).collect();
    let write = |name: &str, idx: Value, src: Value| {
        one_op(
            vec![input("x", &[2, 3], &x, true), idx, src],
            &["x", "i", "s"],
            json!({"name": name, "dim": 0}),
            &["y", "x.grad", "s.grad"],
        )
    };
    let src = || input("s", &[2, 3], &[10.0, 20.0, 30.0, 40.0, 50.0, 60.0], true);
    // An index of x's shape, every place written once (a permutation of each column).
    let perm = || int_input("i", &[2, 3], &[1.0, 0.0, 1.0, 0.0, 1.0, 0.0]);
    let out = write("scatter_add", perm(), src());
    assert_eq!(
        ok(&out[0]),
        (vec![41.0, 22.0, 63.0, 14.0, 55.0, 36.0], vec![2, 3])
    );
    // The known bug (indexing_writes.yaml): scatter_add's backward zeroes x's gradient at
    // the written places (here all of them), the rule of scatter.
    assert_eq!(vals(&out[1]), vec![0.0; 6]);
    assert_eq!(vals(&out[2]), vec![1.0; 6]);
    let out = write("scatter", perm(), src());
    assert_eq!(
        ok(&out[0]),
        (vec![40.0, 20.0, 60.0, 10.0, 50.0, 30.0], vec![2, 3])
    );
    // ... and scatter's passes it through unmasked (PyTorch: all 0 here).
    assert_eq!(vals(&out[1]), vec![1.0; 6]);
    // An index narrower than x along dim: scatter_add's backward fails in its own scatter.
    let out = write(
        "scatter_add",
        int_input("i", &[1, 3], &[1.0, 0.0, 1.0]),
        input("s", &[1, 3], &[10.0, 20.0, 30.0], true),
    );
    assert_eq!(
        ok(&out[0]),
        (vec![1.0, 22.0, 3.0, 14.0, 5.0, 36.0], vec![2, 3])
    );
    assert!(framework_error(&out[1]).contains("shape mismatch in scatter"));
    let out = write(
        "index_add",
        int_input("i", &[2], &[1.0, 1.0]),
        input("s", &[2, 3], &[10.0, 20.0, 30.0, 40.0, 50.0, 60.0], true),
    );
    assert_eq!(
        ok(&out[0]),
        (vec![1.0, 2.0, 3.0, 54.0, 75.0, 96.0], vec![2, 3])
    );
    assert_eq!((vals(&out[1]), vals(&out[2])), (vec![1.0; 6], vec![1.0; 6]));
    let out = one_op(
        vec![
            input("x", &[2, 3], &x, true),
            int_input("i", &[1], &[1.0]),
            input("s", &[1, 3], &[7.0, 8.0, 9.0], true),
        ],
        &["x", "i", "s"],
        json!({"name": "index_put", "accumulate": false}),
        &["y"],
    );
    assert!(unsupported_message(&out[0]).contains("index_put without accumulate"));
}
