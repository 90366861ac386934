# The report's own pages (snakemake --report results/report.html): the training loop of
# each framework side by side with the optimizer defaults, and the provenance of every
# trace (host, CPU, versions, settings).


rule training_loop_page:
    """The PyTorch ↔ candle training-loop correspondence, with the measured defaults."""
    input:
        text=workdir_path(os.path.join(PARITY_DIR, "report", "training_loop.rst")),
        defaults=[
            "results/defaults/torch.json",
            "results/defaults/candle.json",
            "results/defaults/burn.json",
        ],
    output:
        html=report(
            "results/report/training_loop.html",
            caption="../report/captions/training_loop.rst",
            category="4 Training loop",
            labels={"page": "correspondence"},
        ),
    log:
        "results/logs/training_loop_page.log",
    benchmark:
        "results/benchmarks/training_loop_page.tsv"
    conda:
        "../envs/analysis.yaml"
    params:
        code=code("training_loop_page.py"),
    script:
        "../scripts/training_loop_page.py"


rule provenance:
    """Where and with what every trace was made, read from the traces."""
    input:
        lambda wc: [k.trace for k in PLAN.runs()],
    output:
        csv="results/tables/provenance.csv",
        md="results/tables/provenance.md",
        html=report(
            "results/tables/provenance.html",
            caption="../report/captions/provenance.rst",
            category="5 Provenance",
            labels={"table": "traces"},
        ),
    log:
        "results/logs/provenance.log",
    benchmark:
        "results/benchmarks/provenance.tsv"
    conda:
        "../envs/analysis.yaml"
    params:
        code=code("provenance.py"),
    script:
        "../scripts/provenance.py"
