"""The report: Snakemake's own HTML report of a short real run, opened in headless
Chromium (Debian's chromium, driven by Playwright), with screenshots.

Needs /usr/bin/chromium (`scripts/dev/bootstrap --test` installs it); skipped with the reason
where it is missing.
"""

import os
import shutil

import pytest

from conftest import load_test_config, run_workflow

pytestmark = pytest.mark.workflow

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
#: Flags for a headless Chromium on a machine without network or GPU.
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    if not os.path.exists(CHROMIUM):
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    workdir = tmp_path_factory.mktemp("report")
    # .test/tiny.yaml (A3 SGD, conv1d_grad) with A1 Adam for the framework table, 5 steps.
    config = load_test_config("tiny")
    config["experiments"]["a3_sgd"]["steps"] = 5
    config["experiments"]["a1_adam"].update(enabled=True, steps=5)
    config["framework_summary"] = [{"experiment": "a1_adam", "label": "A1 Adam"}]
    run_workflow(workdir, config, "--cores", "2")
    run_workflow(workdir, config, "--report", "results/report.html")
    return workdir / "results/report.html"


@pytest.fixture
def page(report):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(report.as_uri())
        yield page
        browser.close()


def test_report_lists_every_section(page):
    page.get_by_text("Results", exact=True).first.wait_for()
    menu = page.inner_text("body")
    for section in ("1 Summary", "2 Experiments", "3 Probes", "4 Training loop", "5 Provenance"):
        assert section in menu


def test_summary_table_is_rendered(page, report):
    page.get_by_text("1 Summary", exact=True).click()
    page.locator("tr", has_text="summary of verdicts").locator("a[iconname=eye]").click()
    table = page.frame_locator("iframe").locator("table").first
    text = table.inner_text()
    assert "expected_verdict" in text and "a3_sgd" in text and "a1_adam" in text
    assert "pass" in text
    page.screenshot(path=report.parent / "report-summary.png")
    assert (report.parent / "report-summary.png").stat().st_size > 10_000


def test_a_figure_is_rendered(page, report):
    page.get_by_text("2 Experiments", exact=True).click()
    page.get_by_text("a3_sgd", exact=True).click()
    # The label "kind" is a column (a localisation has a table and no figure entry, so
    # Snakemake's report does not offer figure | table as a toggle): the per-step row whose
    # kind is figure.
    figure = page.get_by_role("cell", name="figure", exact=True)
    row = page.locator("tr").filter(has_text="perstep").filter(has=figure).first
    row.locator("a[iconname=eye]").click()
    img = page.locator("img").last
    img.wait_for()
    width = img.evaluate("e => e.complete ? e.naturalWidth : 0")
    assert width > 500  # the 8x4.5 inch, 120 dpi figure
    page.screenshot(path=report.parent / "report-figure.png")


def test_training_loop_page_shows_the_measured_defaults(page):
    page.get_by_text("4 Training loop", exact=True).click()
    page.locator("tr", has_text="correspondence").locator("a[iconname=eye]").click()
    frame = page.frame_locator("iframe")
    text = frame.locator("body").inner_text()
    assert "opt.step(&grads)" in text
    assert "candle_nn::ParamsAdamW::default()" in text or "0.11.0" in text
