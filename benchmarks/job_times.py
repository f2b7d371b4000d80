"""Sum the wall clock of every job of a run, per paper, from Snakemake's `benchmark:` files
(`mtp_core.results.job_times`). Prints one Markdown table; `--csv` writes it too.

    .venv/bin/python benchmarks/job_times.py                   # results/benchmarks of the embedded run
    .venv/bin/python benchmarks/job_times.py --results /tmp/run/results --by-rule
    .venv/bin/python benchmarks/job_times.py --leaderboard-rows  # each paper charged for its leaderboard rows
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mtp_core.results.job_times import job_times, split_leaderboard, summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=Path, default=Path("results"))
    ap.add_argument("--by-rule", action="store_true", help="one row per rule folder instead of per group")
    ap.add_argument("--leaderboard-rows", action="store_true", help="charge each paper for its leaderboard rows")
    ap.add_argument("--csv", type=Path, help="also write the table here")
    args = ap.parse_args()
    jobs = job_times(args.results)
    if args.leaderboard_rows:
        jobs = split_leaderboard(jobs, args.results)
    table = summary(jobs, "rule" if args.by_rule else "group")
    print(table.to_markdown())
    if args.csv:
        table.to_csv(args.csv)


if __name__ == "__main__":
    main()
