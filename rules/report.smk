# The report's own pages (snakemake --report results/report.html): the training loop of
# each framework side by side with the optimizer defaults, and the provenance of every
# trace (host, CPU, versions, settings). Each with its sealed record, which check holds it to.


rule training_loop_page:
    """The PyTorch ↔ candle training-loop correspondence, with the measured defaults."""
    input:
        text=TRAINING_LOOP_TEXT,
        defaults=DEFAULTS_JSON,
    output:
        html=report(
            "results/report/training_loop.html",
            caption="../report/captions/training_loop.rst",
            category="4 Training loop",
            labels={"page": "correspondence"},
        ),
        record=paths.TRAINING_LOOP_SOURCES,
    log:
        "results/logs/training_loop_page.log",
    benchmark:
        "results/benchmarks/training_loop_page.tsv"
    conda:
        "../envs/analysis.yaml"
    params:
        code=code("training_loop_page.py"),
        seal=page_seal("training_loop"),
    script:
        "../scripts/training_loop_page.py"


rule provenance:
    """Where and with what every trace was made, read from the traces."""
    input:
        lambda wc: page_inputs("provenance"),
    output:
        csv="results/tables/provenance.csv",
        md="results/tables/provenance.md",
        html=report(
            "results/tables/provenance.html",
            caption="../report/captions/provenance.rst",
            category="5 Provenance",
            labels={"table": "traces"},
        ),
        record=paths.PROVENANCE_SOURCES,
    log:
        "results/logs/provenance.log",
    benchmark:
        "results/benchmarks/provenance.tsv"
    conda:
        "../envs/analysis.yaml"
    params:
        code=code("provenance.py"),
        seal=lambda wc: page_seal("provenance"),
    script:
        "../scripts/provenance.py"


rule index:
    """The index of results/: every comparison with its verdict and links to its tables
    and figures, the summary, the probes and the other pages (results/README.md)."""
    input:
        unpack(index_inputs),
    output:
        index=paths.INDEX,
        record=paths.INDEX_SOURCES,
    log:
        "results/logs/index.log",
    benchmark:
        "results/benchmarks/index.tsv"
    conda:
        "../envs/analysis.yaml"
    params:
        code=code("index.py"),
        seal=lambda wc: page_seal("index"),
    script:
        "../scripts/index.py"
