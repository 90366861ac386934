"""No-op rerun of the default workflow against `snakemake --version` on the same machine.

Target: ratio ≤ 1.5 (nothing heavy is imported while the DAG is built). Needs the default
workflow's results to be complete (run `snakemake --cores 8` first).

    .venv/bin/python bench/noop_rerun.py
"""

from common import REPO, SNAKEMAKE, machine, median_wall, table, wall

if __name__ == "__main__":
    _, out = wall([SNAKEMAKE, "--cores", "1", "-n"], cwd=REPO)
    if "Nothing to be done" not in out:
        raise SystemExit("the default workflow is not complete; run `snakemake --cores 8` first")
    version = median_wall([SNAKEMAKE, "--version"])
    noop = median_wall([SNAKEMAKE, "--cores", "1"])
    print(machine())
    print(
        table(
            [
                {
                    "snakemake --version (s)": f"{version:.2f}",
                    "no-op rerun (s)": f"{noop:.2f}",
                    "ratio": f"{noop / version:.2f}",
                    "target": "≤ 1.5",
                }
            ],
            ["snakemake --version (s)", "no-op rerun (s)", "ratio", "target"],
        )
    )
