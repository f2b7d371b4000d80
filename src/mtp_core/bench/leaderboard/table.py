"""The leaderboard's table and figure (README "The leaderboard"; plan: `mtp_core.bench.leaderboard.plan`).

Table (`results/tables/leaderboard.{csv,md}`): one line per (prompt set, row), rows in the plan's order (greedy,
the baselines, then each paper's). Columns: tok/s; speedup vs the job's greedy, measured (bench protocol) and
modeled (each forward priced by the cost table of its chunk rows, `decoding.pricing`, calibrated in the job on its
machine); speedup vs greedy on the compiled backend (`plan.COMPILED_REFERENCE`, a strong baseline: the row's tok/s
over that row's) and the seconds the row's decoder spent compiling in its job (`compile_s`, 0 on the eager
backend; never in its tok/s); the speedup modeled on each GPU of `bench.device_costs` (the row's recorded forwards and
greedy's, read from their samples, priced by that GPU's table at a paper model's shape; verification forwards
only: the draft heads' own compute, paper 2's heads and paper 5's Hydra layers, is not priced, so a heads row's
modeled speedups are upper bounds); tokens per forward (bonus token included; pooled over the prompts, all new
tokens over all forwards as Spec-Bench's mean accepted tokens, ± its standard error) and forward passes; lossless
(the decoder's claim) and identical (the fraction of prompts whose tokens equal greedy's: lossless rows on the
eager backend must show 1, for lossy rows it is their exact agreement with greedy, for compiled greedy the
agreement of compiled kernels with eager ones, since rows on the compiled backend are held to compiled greedy's
tokens: `bench.protocol`); task accuracy where the prompts carry reference
answers (the math test split), with its standard error.

Figure (`results/figures/leaderboard.{png,pdf}`): per prompt set, quality against measured speedup; quality is
the agreement with greedy (lossless rows on the top line), and on sets with answers also the task accuracy
(greedy's as a dashed line).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from ...decoding.base import GenerationResult
from ...decoding.pricing import modeled_speedup
from ...io import read_jsonl
from ...results.figures import save_figure, style
from ...results.tables import Table
from ...results.write import samples_path
from ..device_costs import DeviceTable, device_tables
from .plan import COMPILED_REFERENCE, REFERENCE

COLUMNS = [
    "prompt_set",
    "row",
    "paper",
    "label",
    "lossless",
    "n",
    "tokens_per_s",
    "speedup",
    "speedup_modeled",
    "speedup_compiled",
    "compile_s",
    "tokens_per_forward",
    "tokens_per_forward_se",
    "forward_passes",
    "identical",
    "accuracy",
    "accuracy_stderr",
]
SHOWN = {
    "prompt_set": "prompt set",
    "tokens_per_s": "tok/s",
    "speedup": "× greedy",
    "speedup_modeled": "× greedy (modeled)",
    "speedup_compiled": "× compiled greedy",
    "compile_s": "compile s",
    "tokens_per_forward": "tokens/forward",
    "forward_passes": "forwards",
    "identical": "identical to greedy",
    "accuracy": "accuracy (%)",
}
PAPER_COLOURS = {
    "base": "tab:gray",
    "p1": "tab:blue",
    "p2": "tab:orange",
    "p3": "tab:green",
    "p4": "tab:red",
    "p5": "tab:purple",
}


def device_column(t: DeviceTable) -> str:
    return f"speedup_{t.key}"


def recorded_generations(result_path: str) -> list[GenerationResult]:
    """A result's generations as its samples file records them (tokens, accepted lengths, the decoder's `extra`):
    what pricing needs; the times are not recorded there."""
    return [
        GenerationResult(r["tokens"], r["accepted"], r["prompt_tokens"], 0.0, 0.0, r["stop_reason"], r.get("extra", {}))
        for r in read_jsonl(samples_path(result_path))
    ]


def leaderboard_frame(frame: pd.DataFrame, rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Result rows (`report.load_results` of the leaderboard's result files) -> `COLUMNS` and a speedup column per
    GPU table (`device_column`), in the plan's row order (`rows`: `leaderboard.plan.job_rows`, with titles) within
    each prompt set's order of appearance."""
    titles = {r["label"]: r["title"] for r in rows}
    order = {r["label"]: i for i, r in enumerate(rows)}
    tables = device_tables()
    out = []
    for r in frame.to_dict("records"):
        label = os.path.basename(r["path"])[: -len(".json")]
        acc = (r["metrics"] or {}).get("accuracy") or {}
        out.append(
            {
                "prompt_set": r["task"],
                "row": titles.get(label, label),
                "paper": r["paper"],
                "label": label,
                "lossless": "yes" if r["lossless"] else "no",
                "n": r["n"],
                "tokens_per_s": r["tokens_per_s"],
                "speedup": r["speedup_vs_greedy"],
                "speedup_modeled": r["modeled_speedup_vs_greedy"],
                "compile_s": r["compile_s"],
                "tokens_per_forward": r["tokens_per_forward_pooled"],
                "tokens_per_forward_se": r["tokens_per_forward_pooled_se"],
                "forward_passes": r["forward_passes"],
                "identical": r["identical_fraction"],
                "accuracy": 100 * acc["value"] if acc.get("value") is not None else math.nan,
                "accuracy_stderr": 100 * acc["stderr"] if acc.get("stderr") is not None else math.nan,
                "path": r["path"],
            }
        )
    by_set: dict[str, dict[str, dict]] = {}
    for x in out:
        by_set.setdefault(x["prompt_set"], {})[x["label"]] = x
    for members in by_set.values():
        compiled = members.get(COMPILED_REFERENCE)
        greedy = recorded_generations(members[REFERENCE]["path"]) if tables and REFERENCE in members else None
        for x in members.values():
            x["speedup_compiled"] = x["tokens_per_s"] / compiled["tokens_per_s"] if compiled else math.nan
            gens = recorded_generations(x["path"]) if greedy is not None else None
            for t in tables:
                x[device_column(t)] = modeled_speedup(gens, greedy, t.cost_model()) if gens is not None else math.nan
    sets = list(dict.fromkeys(frame["task"]))
    out.sort(key=lambda x: (sets.index(x["prompt_set"]), order.get(x["label"], len(order))))
    data = pd.DataFrame(out, columns=COLUMNS + [device_column(t) for t in tables])
    data["forward_passes"] = data["forward_passes"].astype("Int64")
    return data


def leaderboard_table(frame: pd.DataFrame, rows: Sequence[Mapping[str, Any]]) -> Table:
    data = leaderboard_frame(frame, rows)
    tables = device_tables()
    table = Table(
        data,
        pm={"tokens_per_forward": "tokens_per_forward_se", "accuracy": "accuracy_stderr"},
        digits={
            "tokens_per_s": 1,
            "speedup": 2,
            "speedup_modeled": 2,
            "speedup_compiled": 2,
            "compile_s": 1,
            **{device_column(t): 2 for t in tables},
            "tokens_per_forward": 2,
            "identical": 2,
            "accuracy": 1,
        },
    )
    return table.rename({**SHOWN, **{device_column(t): f"× greedy (modeled, {t.title})" for t in tables}})


def leaderboard_figure(
    frame: pd.DataFrame, rows: Sequence[Mapping[str, Any]], png: str | os.PathLike, pdf: str | os.PathLike
) -> None:
    """Quality vs measured speedup, a panel per (prompt set, quality measure); one point per row, coloured by
    paper and labelled with the row's title."""
    from matplotlib.figure import Figure

    data = leaderboard_frame(frame, rows)
    panels = [(ps, "identical") for ps in dict.fromkeys(data["prompt_set"])]
    panels += [
        (ps, "accuracy")
        for ps in dict.fromkeys(data["prompt_set"])
        if data.loc[data["prompt_set"] == ps, "accuracy"].notna().any()
    ]
    with style():
        fig = Figure(figsize=(4.2 * len(panels), 3.8), layout="constrained")
        for i, (ps, measure) in enumerate(panels):
            ax = fig.add_subplot(1, len(panels), i + 1)
            sub = data[data["prompt_set"] == ps]
            y = sub[measure] * (100 if measure == "identical" else 1)
            for paper in dict.fromkeys(sub["paper"]):
                m = sub["paper"] == paper
                ax.scatter(
                    sub.loc[m, "speedup"],
                    y[m],
                    s=18,
                    color=PAPER_COLOURS.get(paper, "black"),
                    label=paper,
                    marker="o" if measure == "identical" else "s",
                )
            for xv, yv, t in zip(sub["speedup"], y, sub["row"]):
                ax.annotate(t, (xv, yv), textcoords="offset points", xytext=(3, 3), fontsize=5)
            greedy = sub[sub["label"] == "greedy"]
            if measure == "accuracy" and len(greedy):
                ax.axhline(float(greedy["accuracy"].iloc[0]), color="gray", linestyle="--", linewidth=0.8)
            ax.axvline(1.0, color="gray", linewidth=0.6)
            ax.set_xlabel("speedup vs greedy (measured tok/s)")
            ax.set_ylabel("identical to greedy (% of prompts)" if measure == "identical" else "task accuracy (%)")
            ax.set_title(f"{ps}: {'agreement with greedy' if measure == 'identical' else 'accuracy'}")
            ax.legend(loc="lower left")
    save_figure(fig, png, pdf)
