"""The learned placement policy against critical-path list, HEFT and inc-ilp, and its inference
time: a thin wrapper over the experiment config that replaced this benchmark,
`data/experiments/doppler.toml` (its default profile: DOPPLER-shaped graphs of 103-234
ops on 4 and 8 devices; then its ``speed`` profile: transformer blocks of 1,021 and 9,997 ops).
Runs each profile through the experiment engine (resumable, rows with their provenance) and prints
its report; the same as

    incsched experiment run doppler [--profile P] && incsched experiment report out/experiments/doppler[-P]

    .venv/bin/python benchmarks/rl_placement.py                   # default and speed profiles
    .venv/bin/python benchmarks/rl_placement.py --profiles speed  # inference time only
"""

from __future__ import annotations

import argparse
from pathlib import Path

from incsched.cli import main as incsched


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profiles", nargs="+", default=["default", "speed"], help="profiles of doppler.toml to run ('default': its top level)")
    ap.add_argument("-o", "--output", default="out/experiments", help="parent of the run folders (doppler, doppler-PROFILE)")
    args = ap.parse_args(argv)
    status = 0
    for profile in args.profiles:
        default = profile == "default"
        out = Path(args.output, "doppler" if default else f"doppler-{profile}")
        status |= incsched(["experiment", "run", "doppler", "-o", str(out)] + ([] if default else ["--profile", profile]))
        incsched(["experiment", "report", str(out)])
        print((out / "report" / "report.md").read_text())
    return status


if __name__ == "__main__":
    raise SystemExit(main())
