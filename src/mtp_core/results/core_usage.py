"""How a local run held its cores, from its Snakemake log: when each job ran and how many threads it declared, and
the stretches in which declared threads left cores free (the embedded budget: a 2-core run is only as short as the
jobs it keeps side by side).

Snakemake writes the log to `.snakemake/log/<date>.snakemake.log` in the working directory (its stdout holds the
same lines): `Provided cores: N`, then for each job a `[<date>]` line, `rule <name>:` or `localrule <name>:` and
indented fields (`jobid`, `wildcards`, `threads`: none written for one thread), and `Finished jobid: <id>` after a
`[<date>]` line when it ends. Times have whole seconds. What a job's threads then did, and whether its process used
them, is in its benchmark file (`job_times`), not here.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pandas as pd

STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
START = re.compile(r"^(?:local)?rule (\w+):$")
FIELD = re.compile(r"^\s+(jobid|wildcards|threads): (.*)$")
END = re.compile(r"^Finished jobid: (\d+)")
CORES = re.compile(r"^Provided cores: (\d+)$")


def provided_cores(log: Path) -> int:
    """The `--cores` the run was given, as its log says."""
    for line in log.read_text().splitlines():
        if m := CORES.match(line):
            return int(m.group(1))
    raise ValueError(f"{log}: no 'Provided cores' line (not the log of a local Snakemake run)")


def job_spans(log: Path) -> pd.DataFrame:
    """One row per job the run started: jobid, rule, wildcards, threads, start_s and end_s (seconds after the first
    start), finished (false for a job the log never saw end: it counts as running until the log's last time)."""
    stamp, jobs, ends, current = None, {}, {}, None
    for line in log.read_text().splitlines():
        if m := STAMP.match(line):
            stamp, current = dt.datetime.strptime(m.group(1), "%a %b %d %H:%M:%S %Y"), None
        elif (m := START.match(line)) and stamp is not None:
            current = {"rule": m.group(1), "wildcards": "", "threads": 1, "start": stamp}
        elif current is not None and (m := FIELD.match(line)):
            key, value = m.groups()
            if key == "jobid":
                jobs[int(value)] = current
            else:
                current[key] = int(value) if key == "threads" else value
        elif (m := END.match(line)) and stamp is not None:
            ends[int(m.group(1))] = stamp
    if not jobs:
        raise ValueError(f"{log}: no job started")
    t0, last = min(j["start"] for j in jobs.values()), stamp
    rows = [
        {
            "jobid": jobid,
            "rule": j["rule"],
            "wildcards": j["wildcards"],
            "threads": j["threads"],
            "start_s": (j["start"] - t0).total_seconds(),
            "end_s": (ends.get(jobid, last) - t0).total_seconds(),
            "finished": jobid in ends,
        }
        for jobid, j in jobs.items()
    ]
    return pd.DataFrame(rows).sort_values(["start_s", "jobid"], ignore_index=True)


def free_stretches(spans: pd.DataFrame, cores: int) -> pd.DataFrame:
    """The run from its first start to its last end in stretches over which the same jobs ran: start_s, seconds,
    held (their threads, at most `cores`) and free cores, and the jobs (`rule[wildcards]`). A stretch ends wherever a
    job starts or ends (whole seconds)."""
    edges = sorted(set(spans["start_s"]) | set(spans["end_s"]))
    rows: list[dict] = []
    for start, end in zip(edges, edges[1:], strict=False):
        running = spans[(spans["start_s"] <= start) & (spans["end_s"] > start)]
        names = ", ".join(f"{r.rule}[{r.wildcards}]" if r.wildcards else r.rule for r in running.itertuples())
        held = min(int(running["threads"].sum()), cores)
        if rows and rows[-1]["jobs"] == names:
            rows[-1]["seconds"] += int(end - start)
        else:
            rows.append({"start_s": int(start), "seconds": int(end - start), "held": held, "free": cores - held,
                         "jobs": names})  # fmt: skip
    return pd.DataFrame(rows, columns=["start_s", "seconds", "held", "free", "jobs"])


def usage_summary(stretches: pd.DataFrame, cores: int) -> dict[str, float]:
    """Elapsed minutes, the core-minutes the run's cores held, those the jobs' threads held, and the free ones."""
    elapsed = float(stretches["seconds"].sum())
    held = float((stretches["seconds"] * stretches["held"]).sum())
    return {
        "elapsed_min": elapsed / 60,
        "core_min": cores * elapsed / 60,
        "held_core_min": held / 60,
        "free_core_min": (cores * elapsed - held) / 60,
    }


def log_usage(log: Path) -> tuple[int, pd.DataFrame, dict[str, float]]:
    """From a local run's Snakemake log: its cores, its `free_stretches` (with start_min, min and the free
    core-minutes of each) and their `usage_summary`."""
    cores = provided_cores(log)
    stretches = free_stretches(job_spans(log), cores)
    stretches = stretches.assign(
        start_min=stretches["start_s"] / 60,
        min=stretches["seconds"] / 60,
        free_core_min=stretches["seconds"] * stretches["free"] / 60,
    )
    return cores, stretches, usage_summary(stretches, cores)
