"""Sum the wall clock of every job of a run, per paper, from Snakemake's `benchmark:` files
(`mtp_core.results.job_times`). Prints one Markdown table; `--csv` writes it too. With `--log`, also how the run
held its cores (`mtp_core.results.core_usage`): the core-minutes its jobs' threads held against those of its
`--cores`, the CPU its jobs used, and every stretch of at least `--min-seconds` in which cores were free.

    .venv/bin/python benchmarks/job_times.py                   # results/benchmarks of the embedded run
    .venv/bin/python benchmarks/job_times.py --results /tmp/run/results --by-rule
    .venv/bin/python benchmarks/job_times.py --leaderboard-rows  # each paper charged for its leaderboard rows
    .venv/bin/python benchmarks/job_times.py --log .snakemake/log/2026-12-02T021324.123456.snakemake.log
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mtp_core.results.core_usage import log_usage
from mtp_core.results.job_times import job_times, split_leaderboard, summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=Path, default=Path("results"))
    ap.add_argument("--by-rule", action="store_true", help="one row per rule folder instead of per group")
    ap.add_argument("--leaderboard-rows", action="store_true", help="charge each paper for its leaderboard rows")
    ap.add_argument("--csv", type=Path, help="also write the table here")
    ap.add_argument("--log", type=Path, help="the run's Snakemake log (a local run): how it held its cores")
    ap.add_argument("--min-seconds", type=int, default=30, help="the shortest stretch with free cores listed")
    args = ap.parse_args()
    jobs = job_times(args.results)
    if args.leaderboard_rows:
        jobs = split_leaderboard(jobs, args.results)
    table = summary(jobs, "rule" if args.by_rule else "group")
    print(table.to_markdown())
    if args.csv:
        table.to_csv(args.csv)
    if args.log:
        cores, stretches, use = log_usage(args.log)
        print(
            f"\n{use['elapsed_min']:.1f} min on {cores} cores ({use['core_min']:.1f} core-min): the jobs' threads held "
            f"{use['held_core_min']:.1f}, {use['free_core_min']:.1f} free; the jobs used {jobs['cpu_s'].sum() / 60:.1f} "
            "CPU-min (benchmark files)\n"
        )
        free = stretches[(stretches["free"] > 0) & (stretches["seconds"] >= args.min_seconds)]
        print(free[["start_min", "min", "free", "jobs"]].round(1).to_markdown(index=False))


if __name__ == "__main__":
    main()
