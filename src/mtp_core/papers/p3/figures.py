"""Paper 3's figures: per-category τ from result JSONs (Figures 4-5, `category_figure`) and the mask alignment of
the Figure-2 analysis CSV (`layer_curves`, `alignment_figure`). Apart from the tables so that a table job loads no
matplotlib."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ...results.figures import save_figure, style
from ...results.read import category_frame


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


def layer_curves(frame: pd.DataFrame) -> pd.DataFrame:
    """Long frame for the figure: layer, outcome ('accepted' / 'rejected'), mean, std, n."""
    g = frame.groupby(["layer", "accepted"])["cosine"]
    out = pd.concat([g.mean().rename("mean"), g.std(ddof=1).rename("std"), g.size().rename("n")], axis=1)
    out = out.reset_index()
    out["outcome"] = np.where(out["accepted"], "accepted", "rejected")
    return out[["layer", "outcome", "mean", "std", "n"]]
