"""The wall clock and CPU time of every job of a run, per group, from Snakemake's `benchmark:` files.

Every rule that does real work writes `results/benchmarks/<group>/.../<job>.tsv` (the launcher rules too: their
wall clock is submit + wait). A group is a paper (`p1`..`p5`), the leaderboard, or shared work: data preparation,
the prepared and fine-tuned models (done once for all papers) and the foundation's decoding and evaluation.
Table and figure rules have no benchmark file (seconds each).

`split_leaderboard` charges each paper for its own leaderboard rows: a leaderboard job's wall and CPU time are
split over its rows in proportion to the decoding wall each row's result records (`decode_stats.wall_s`), the
rows' paper taking its share and the shared rows (greedy, the n-gram baselines: paper `base`) staying with the
leaderboard. A split job counts once in every group it is split over, and once in the total.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

SHARED = {"data": "shared: data", "prepare_model": "shared: models", "finetune_model": "shared: models"}
FOUNDATION = {"decode_prompts", "evaluate"}
ONE_LEVEL = FOUNDATION | {"prepare_model", "finetune_model"}  # folders below these are wildcards, not rules


def group_of(rel: Path) -> str:
    top = rel.parts[0]
    if top in FOUNDATION:
        return "foundation"
    return SHARED.get(top, top)


def job_times(results: Path) -> pd.DataFrame:
    """One row per benchmark file: group, rule folder, job, wall seconds, CPU seconds, peak RSS (MB)."""
    root = results / "benchmarks"
    rows = []
    for tsv in sorted(root.rglob("*.tsv")):
        rel = tsv.relative_to(root)
        parts = rel.with_suffix("").parts
        bench = pd.read_csv(tsv, sep="\t")
        if bench.empty:
            raise ValueError(f"{tsv}: no measurement row")
        last = bench.iloc[-1]  # a rerun job appends nothing: Snakemake rewrites the file
        rows.append(
            {
                "group": group_of(rel),
                "rule": parts[0] if parts[0] in ONE_LEVEL else "/".join(parts[:2]),
                "job": "/".join(parts),
                "wall_s": float(last["s"]),
                "cpu_s": float(last["cpu_time"]),
                "max_rss_mb": float(last["max_rss"]),
            }
        )
    if not rows:
        raise ValueError(f"{root}: no benchmark files")
    return pd.DataFrame(rows)


def row_walls(results: Path, prompt_set: str) -> dict[str, float]:
    """Decoding wall seconds per paper (`base` for the shared rows) of one leaderboard job's row results."""
    files = sorted(results.glob(f"decode/leaderboard/*/prompts-{prompt_set}/*.json"))
    if not files:
        raise ValueError(f"{results}/decode/leaderboard/*/prompts-{prompt_set}/: no row results to split the job by")
    walls: dict[str, float] = {}
    for f in files:
        d = json.loads(f.read_text())
        walls[d["paper"]] = walls.get(d["paper"], 0.0) + float(d["decode_stats"]["wall_s"])
    return walls


def split_leaderboard(jobs: pd.DataFrame, results: Path) -> pd.DataFrame:
    """`jobs` with every leaderboard job replaced by one row per paper (module docstring, `--leaderboard-rows`)."""
    rows = []
    for job in jobs.to_dict("records"):
        if job["rule"] != "leaderboard/decode":
            rows.append(job)
            continue
        walls = row_walls(results, Path(job["job"]).name)
        total = sum(walls.values())
        for paper, wall in sorted(walls.items()):
            share = wall / total
            group = "leaderboard" if paper == "base" else paper
            rows.append({**job, "group": group, "wall_s": job["wall_s"] * share, "cpu_s": job["cpu_s"] * share})
    return pd.DataFrame(rows)


def summary(jobs: pd.DataFrame, by: str) -> pd.DataFrame:
    out = jobs.groupby(by, sort=True).agg(
        jobs=("job", "nunique"), wall_min=("wall_s", "sum"), cpu_min=("cpu_s", "sum"), max_rss_mb=("max_rss_mb", "max")
    )
    out[["wall_min", "cpu_min"]] = (out[["wall_min", "cpu_min"]] / 60).round(1)
    total = pd.DataFrame(
        [
            [
                jobs["job"].nunique(),
                out["wall_min"].sum().round(1),
                out["cpu_min"].sum().round(1),
                out["max_rss_mb"].max(),
            ]
        ],
        columns=out.columns,
        index=["total"],
    )
    return pd.concat([out, total])
