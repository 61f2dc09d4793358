"""The learned stage pre-scheduler against the heuristics and the proven optimum, and its inference
time: a thin wrapper over the experiment config that replaced this benchmark,
`data/experiments/respect.toml` (its default profile: the shipped graphs at K 2/4/8 and
held-out RESPECT-like graphs; then its ``speed`` profile: 1,000- and 10,000-node generated graphs).
Runs each profile through the experiment engine (resumable, rows with their provenance) and prints
its report; the same as

    incsched experiment run respect [--profile P] && incsched experiment report out/experiments/respect[-P]

    .venv/bin/python benchmarks/rl_stage.py                       # default and speed profiles
    .venv/bin/python benchmarks/rl_stage.py --profiles quick      # the quick profile only
"""

from __future__ import annotations

import argparse
from pathlib import Path

from incsched.cli import main as incsched


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profiles", nargs="+", default=["default", "speed"], help="profiles of respect.toml to run ('default': its top level)")
    ap.add_argument("-o", "--output", default="out/experiments", help="parent of the run folders (respect, respect-PROFILE)")
    args = ap.parse_args(argv)
    status = 0
    for profile in args.profiles:
        default = profile == "default"
        out = Path(args.output, "respect" if default else f"respect-{profile}")
        status |= incsched(["experiment", "run", "respect", "-o", str(out)] + ([] if default else ["--profile", profile]))
        incsched(["experiment", "report", str(out)])
        print((out / "report" / "report.md").read_text())
    return status


if __name__ == "__main__":
    raise SystemExit(main())
