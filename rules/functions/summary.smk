# The input and params functions of rules/summary.smk and rules/report.smk (Snakemake's
# linter keeps functions out of a file of rules); included at the top of summary.smk.

from parity.report import sealed

#: Our text of the training-loop page, as its job's input names it.
TRAINING_LOOP_TEXT = workdir_path(
    os.path.join(PARITY_DIR, "report", "training_loop.rst")
)
#: The optimizer defaults of PyTorch and of each Rust framework a run uses, as each
#: prints them (parity.report.sealed.defaults_json).
DEFAULTS_JSON = sealed.defaults_json(PLAN)


def job_codes():
    """The ``code`` param of each job whose results the summary and the probe table gather:
    a result made by other code is not current."""
    return {
        # one script (rules compare and perstep) writes the three tables
        "perstep": code("compare.py"),
        "split": code("compare.py"),
        "diagnosis": code("compare.py"),
        "localise": code("localise.py"),
        "summary": code("summary.py"),
        "probes_table": code("probes_table.py"),
        "crosshost": code("crosshost.py"),
    }


def write_partial_summary():
    """After a failed run (onerror): keep summary.csv and probes.csv only where they are
    still current, else remove them and write summary.partial.* / probes.partial.* with
    an "error" row naming the log of each comparison or probe cell without a current
    result (parity.report.partial.after_failed_run, parity.probe.table.after_failed_run); with
    remote hosts, each cell a host owes without a current result is an "error" row naming
    the host, the stage that failed and its log."""
    from parity.probe import table as probes_table
    from parity.report import partial

    codes = job_codes()
    comparisons = [(c, PLAN.comparison_job(c)) for c in PLAN.comparisons()]
    print(
        partial.after_failed_run(
            comparisons, PLAN.unsupported_params(), codes, remote_crosshost_jobs()
        ),
        file=sys.stderr,
    )
    if PROBES.probes:
        print(
            probes_table.after_failed_run(PROBES, codes, remote_probe_hosts()),
            file=sys.stderr,
        )


def all_results():
    """The machine-readable results the summary gathers: every comparison's, and with
    remote hosts every cross-host job's (their rows are the hosts' cells, cpu@mac)."""
    return [c.result(kind) for c in PLAN.comparisons() for kind in c.kinds] + [
        j["result"] for j in remote_crosshost_jobs()
    ]


def page_inputs(page):
    """The files sealed page ``page`` (parity.report.sealed.PAGES) is made from, as its
    rule's input names them (parity.report.sealed.page_inputs)."""
    probes = PROBES if PROBES.probes else None
    return sealed.page_inputs(page, PLAN, probes, TRAINING_LOOP_TEXT)


def page_seal(page):
    """Param ``seal`` of the job of sealed page ``page``, what it records and what the
    check job holds that record to (parity.report.sealed.plan_spec)."""
    probes = PROBES if PROBES.probes else None
    script = sealed.SCRIPTS[page]
    return sealed.plan_spec(page, PLAN, probes, TRAINING_LOOP_TEXT, code(script))


def check_inputs(wildcards):
    """The tables whose verdicts the check target gates on, and the records of every table
    and page a person reads that check holds to them."""
    out = {
        "summary": paths.SUMMARY.format(ext="csv"),
        "summary_sources": paths.SUMMARY_SOURCES,
        **{f"{page}_record": record for page, (_, record) in sealed.PAGES.items()},
    }
    if PROBES.probes:
        out["probes"] = paths.PROBES_TABLE.format(ext="csv")
        out["probes_sources"] = paths.PROBES_SOURCES
    return out


def check_params():
    """What check holds the tables and their records against: every comparison's job, the
    unsupported cells, each job's code hash, the cross-host jobs, the probe plan, each
    sealed page's spec and the fuzz campaign's (parity.report.check.check_params)."""
    from parity.report.check import check_params as params

    return params(
        [PLAN.comparison_job(c) for c in PLAN.comparisons()],
        PLAN.unsupported_params(),
        job_codes(),
        remote_crosshost_jobs(),
        PROBES.to_params() if PROBES.probes else None,
        remote_probe_hosts(),
        [page_seal(page) for page in sealed.PAGES],
        [fuzz_seal()],
    )


def index_inputs(wildcards):
    """The index is made from the summary, its record and with probes the probe table;
    it waits for the pages it links to (their records, made after each page)."""
    out = {
        "summary": paths.SUMMARY.format(ext="csv"),
        "summary_sources": paths.SUMMARY_SOURCES,
        "pages": [
            record for page, (_, record) in sealed.PAGES.items() if page != "index"
        ],
    }
    if PROBES.probes:
        out["probes"] = paths.PROBES_TABLE.format(ext="csv")
    return out


def versions_table_inputs(wildcards):
    """The release matrix reads the summary and, with probes, the probe table."""
    out = {"summary": paths.SUMMARY.format(ext="csv")}
    if PROBES.probes:
        out["probes"] = paths.PROBES_TABLE.format(ext="csv")
    return out


def summary_outputs():
    """The summary and the probe table, with their records: what the check target reads."""
    return (
        [paths.SUMMARY.format(ext=e) for e in ("csv", "md")]
        + [paths.SUMMARY_SOURCES]
        + PROBES.outputs()
        + ([paths.PROBES_SOURCES] if PROBES.probes else [])
    )
