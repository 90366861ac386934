"""The index of results/ (parity.report.index) from given rows, without a run; the index of
a real run is tested in tests/test_stale.py."""

from parity.report.index import index_markdown


def row(experiment, comparison, verdict, expected, culprit=""):
    return {
        "experiment": experiment,
        "comparison": comparison,
        "device": "cpu",
        "verdict": verdict,
        "expected_verdict": expected,
        "culprit": culprit,
    }


def test_a_verdict_check_refuses_is_bold_and_named_at_the_top():
    rows = [
        row("a3_sgd", "main", "pass", "pass", "(skipped)"),
        row("a3_wd_mismatch", "main", "expected-fail", "expected-fail", "update:fc1.weight"),
        row("a3_adam", "main", "fail", "pass", "fc1.weight.grad"),
    ]
    files = {
        ("a3_sgd", "main", "cpu"): [
            (
                "perstep",
                {
                    "csv": "results/tables/a3_sgd/perstep-cpu.csv",
                    "md": "results/tables/a3_sgd/perstep-cpu.md",
                    "png": "results/figures/a3_sgd/perstep-cpu.png",
                },
            ),
            ("localise", {"md": "results/tables/a3_sgd/localise-main-cpu.md"}),
        ],
    }
    text = index_markdown(rows, files, None)
    assert "**3 comparisons**: 1 expected-fail, 1 fail, 1 pass; **1** differ" in text
    assert "differ from their expectation: a3_adam main cpu." in text
    lines = text.splitlines()
    assert lines[lines.index("## a3_sgd") + 4] == (
        "| main | cpu | pass | (skipped) | "
        "[perstep](tables/a3_sgd/perstep-cpu.md) ([csv](tables/a3_sgd/perstep-cpu.csv)), "
        "[localise](tables/a3_sgd/localise-main-cpu.md) | "
        "[perstep](figures/a3_sgd/perstep-cpu.png) |"
    )
    assert lines[lines.index("## a3_adam") + 4] == (
        "| main | cpu | **fail** (expected pass) | fc1.weight.grad | - | - |"
    )
    assert "Probes" not in text  # without probes, no probe line
    assert "[Summary](tables/summary.md) ([CSV](tables/summary.csv))" in text
