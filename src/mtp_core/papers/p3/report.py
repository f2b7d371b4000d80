"""Paper 3's tables and figures from result JSONs (Tables 1-2, the pruning and mask-strategy ablations, Figures
4-5) and from the
Figure-2 analysis CSV.

Every shown result is one (model, method, block complexity BC) setting of a decoding job that also ran greedy
(the job's reference, `p3_plan.experiment_settings` names both files). Per setting the tables show

* τ: tokens emitted per forward pass, the bonus token included, pooled over the prompts (all new tokens over all
  forward passes: §4's "tokens accepted and the bonus token per model call", so that model calls = N / τ; greedy
  = 1; the prompt forward counts as a pass emitting one token), ± its standard error over prompts;
* forward passes (total over prompts), tok/s (bench median), speed vs the job's own greedy run;
* identical: the fraction of prompts whose tokens equal greedy's (1.0 for a lossless decoder; the lossless
  column).

Rows are (model, method) in the configured order (Table 2 adds the mask count and the branching; Table 1 a
greedy reference row per model, mean over its jobs' greedy runs); columns are per BC.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ...results.figures import save_figure, style
from ...results.read import category_frame
from ...results.tables import Table, pivot_pm

REFERENCE_TITLE = "Greedy (reference)"
VALUES = ("tau", "forward_passes", "tokens_per_s", "speedup", "identical")
SHOWN = {
    "tau": "τ (tokens/forward, incl. bonus)",
    "forward_passes": "forwards",
    "tokens_per_s": "tok/s",
    "speedup": "× greedy",
    "identical": "identical",
}
LONG_COLUMNS = [
    "model",
    "method",
    "title",
    "masks",
    "branching",
    "bc",
    "tau",
    "tau_se",
    "forward_passes",
    "tokens_per_s",
    "speedup",
    "identical",
    "n",
    "path",
]


def branching_label(params: Mapping[str, Any]) -> str:
    """`dynamic`, or the fixed expansion with its per-depth counts (`fixed [3, 3]`, `top1 [6, 2]`)."""
    exp = str(params.get("expansion", "dynamic"))
    br = params.get("branching")
    return exp if exp == "dynamic" or br is None else f"{exp} {list(br)}"


def p3_frame(frame: pd.DataFrame, settings: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per shown setting (columns `LONG_COLUMNS`), in `settings` order. `frame` is `load_results` of the
    settings' and their references' files; speed vs greedy divides by the reference's tok/s."""
    by_path = frame.set_index("path")
    rows = []
    for s in settings:
        if s["path"] not in by_path.index or s["reference"] not in by_path.index:
            missing = s["path"] if s["path"] not in by_path.index else s["reference"]
            raise ValueError(f"p3 table: no result loaded for {missing}")
        r, ref = by_path.loc[s["path"]], by_path.loc[s["reference"]]
        params = s.get("params") or {}
        rows.append(
            {
                "model": s["model"],
                "method": s["method"],
                "title": s["title"],
                "masks": int(params.get("masks_per_step", 1)),
                "branching": branching_label(params),
                "bc": int(s["bc"]),
                "tau": r["tokens_per_forward_pooled"],
                "tau_se": r["tokens_per_forward_pooled_se"],
                "forward_passes": r["forward_passes"],
                "tokens_per_s": r["tokens_per_s"],
                "speedup": _ratio(r["tokens_per_s"], ref["tokens_per_s"]),
                "identical": r["identical_fraction"],
                "n": r["n"],
                "path": s["path"],
            }
        )
    return pd.DataFrame(rows, columns=LONG_COLUMNS)


def reference_rows(frame: pd.DataFrame, settings: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Per (model, BC) a greedy row: mean τ and tok/s over the greedy runs of the jobs shown for that model."""
    by_path = frame.set_index("path")
    rows = []
    for model in dict.fromkeys(s["model"] for s in settings):
        refs = list(dict.fromkeys(s["reference"] for s in settings if s["model"] == model))
        ref = by_path.loc[refs]
        for bc in dict.fromkeys(int(s["bc"]) for s in settings if s["model"] == model):
            rows.append(
                {
                    "model": model,
                    "method": "greedy",
                    "title": REFERENCE_TITLE,
                    "masks": 0,
                    "branching": "-",
                    "bc": bc,
                    "tau": ref["tokens_per_forward_pooled"].mean(),
                    "tau_se": math.nan,
                    "forward_passes": ref["forward_passes"].mean(),
                    "tokens_per_s": ref["tokens_per_s"].mean(),
                    "speedup": 1.0,
                    "identical": ref["identical_fraction"].mean(),
                    "n": ref["n"].iloc[0],
                    "path": refs[0],
                }
            )
    return pd.DataFrame(rows, columns=LONG_COLUMNS)


def method_table(
    frame: pd.DataFrame,
    settings: Sequence[Mapping[str, Any]],
    index: Sequence[str] = ("model", "title"),
    reference: bool = False,
) -> Table:
    """The methods x BC layout of Tables 1-2 and the pruning ablation: a row per `index` key, per BC the columns
    `BC<bc> τ (tokens/forward, incl. bonus)` (± standard error), forwards, tok/s, × greedy and identical. `reference`:
    prepend each model's greedy row (Table 1)."""
    long = p3_frame(frame, settings)
    if reference:
        long = pd.concat([reference_rows(frame, settings), long], ignore_index=True)
        long = long.iloc[_model_major(long)].reset_index(drop=True)
    long = long.assign(column=[f"BC{b}" for b in long["bc"]])
    table = pivot_pm(long, list(index), "column", list(VALUES), ["tau_se", None, None, None, None], digits=2)
    names = {}
    for c in dict.fromkeys(long["column"]):
        names |= {f"{c}/{v}": f"{c} {SHOWN[v]}" for v in VALUES} | {f"{c}/tau_se": f"{c} τ se"}
    table.digits |= {f"{c}/tokens_per_s": 1 for c in long["column"]}
    table.digits |= {f"{c}/forward_passes": 0 for c in long["column"]}
    return table.rename(names)


TABLE_INDEX = {
    "table1": ("model", "title"),
    "table2": ("model", "masks", "branching", "title"),
    "pruning": ("model", "title"),
    "strategies": ("model", "title"),
}


def p3_table(name: str, frame: pd.DataFrame, settings: Sequence[Mapping[str, Any]]) -> Table:
    """Table `name` (table1 | table2 | pruning | strategies) of paper 3."""
    if name not in TABLE_INDEX:
        raise ValueError(f"unknown paper-3 table {name!r}; known: {sorted(TABLE_INDEX)}")
    return method_table(frame, settings, TABLE_INDEX[name], reference=name == "table1")


# ---------------------------------------------------------------------------------------------- figures


def category_long(frame: pd.DataFrame, settings: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Per (setting, prompt category): model, title, bc, category, τ pooled over the category's prompts and its
    standard error."""
    cats = category_frame(frame).set_index(["path", "category"])
    rows = []
    for s in settings:
        sub = cats.loc[s["path"]] if s["path"] in cats.index.get_level_values(0) else None
        if sub is None:
            raise ValueError(f"p3 figure: no per-category statistics in {s['path']}")
        for cat, r in sub.iterrows():
            rows.append(
                {
                    "model": s["model"],
                    "method": s["method"],
                    "title": s["title"],
                    "bc": int(s["bc"]),
                    "category": cat,
                    "tau": r["tokens_per_forward_pooled"],
                    "tau_se": r["tokens_per_forward_pooled_se"],
                }
            )
    return pd.DataFrame(rows, columns=["model", "method", "title", "bc", "category", "tau", "tau_se"])


def category_figure(
    frame: pd.DataFrame,
    settings: Sequence[Mapping[str, Any]],
    png: str | os.PathLike,
    pdf: str | os.PathLike,
    title: str = "",
) -> pd.DataFrame:
    """Figures 4-5: per prompt category, a bar per (method, BC) of τ (tokens per forward, bonus included); a
    colour per method, higher opacity for larger BC (as in the paper). Returns the plotted frame."""
    long = category_long(frame, settings)
    cats, meths = list(dict.fromkeys(long["category"])), list(dict.fromkeys(long["title"]))
    bcs = sorted(set(long["bc"]))
    n_bars = len(meths) * len(bcs)
    width = 0.85 / max(1, n_bars)
    with style():
        fig = Figure(figsize=(max(6.0, 0.9 * len(cats) + 2), 3.4), layout="constrained")
        ax = fig.add_subplot()
        colors = [f"C{i % 10}" for i in range(len(meths))]
        for i, m in enumerate(meths):
            for j, bc in enumerate(bcs):
                sub = long[(long["title"] == m) & (long["bc"] == bc)].set_index("category")
                k = i * len(bcs) + j
                xs = [c - 0.425 + (k + 0.5) * width for c in range(len(cats))]
                ys = [sub["tau"].get(c, np.nan) for c in cats]
                alpha = 0.35 + 0.65 * (j + 1) / len(bcs)
                ax.bar(xs, ys, width, color=colors[i], alpha=alpha, label=f"{m}, BC={bc}")
        ax.axhline(1.0, color="0.4", linewidth=0.8, linestyle="--")
        ax.set_xticks(range(len(cats)), cats, rotation=20)
        ax.set_ylabel("τ: tokens per forward (incl. bonus)")
        ax.grid(axis="x", visible=False)
        if title:
            ax.set_title(title)
        ax.legend(ncols=min(len(bcs), 4), loc="upper left", bbox_to_anchor=(1.0, 1.0))
    save_figure(fig, png, pdf)
    return long


def alignment_figure(curves: pd.DataFrame, png: str | os.PathLike, pdf: str | os.PathLike, title: str = "") -> None:
    """Figure 2: mean cosine similarity (± std band) of mask-token and next-true-token hidden states per layer,
    for accepted and rejected mask predictions (`layer_curves`)."""
    with style():
        fig = Figure(figsize=(4.8, 3.2), layout="constrained")
        ax = fig.add_subplot()
        for i, outcome in enumerate(("accepted", "rejected")):
            sub = curves[curves["outcome"] == outcome].sort_values("layer")
            if sub.empty:
                continue
            n = int(sub["n"].iloc[0])
            ax.plot(sub["layer"], sub["mean"], marker="o", markersize=2, color=f"C{i}", label=f"{outcome} (n={n})")
            std = sub["std"].fillna(0.0)
            ax.fill_between(sub["layer"], sub["mean"] - std, sub["mean"] + std, color=f"C{i}", alpha=0.2)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("layer (0 = embeddings)")
        ax.set_ylabel("cosine(mask, next true token)")
        if title:
            ax.set_title(title)
        ax.legend()
    save_figure(fig, png, pdf)


def _ratio(a: float, b: float) -> float:
    return a / b if b and not (isinstance(b, float) and math.isnan(b)) else math.nan


def _model_major(long: pd.DataFrame) -> list[int]:
    """Row order: models in first-appearance order, each model's rows in their current order."""
    first = {m: i for i, m in reversed(list(enumerate(long["model"])))}
    return sorted(range(len(long)), key=lambda i: first[long["model"].iloc[i]])


def layer_curves(frame: pd.DataFrame) -> pd.DataFrame:
    """Long frame for the figure: layer, outcome ('accepted' / 'rejected'), mean, std, n."""
    g = frame.groupby(["layer", "accepted"])["cosine"]
    out = pd.concat([g.mean().rename("mean"), g.std(ddof=1).rename("std"), g.size().rename("n")], axis=1)
    out = out.reset_index()
    out["outcome"] = np.where(out["accepted"], "accepted", "rejected")
    return out[["layer", "outcome", "mean", "std", "n"]]
