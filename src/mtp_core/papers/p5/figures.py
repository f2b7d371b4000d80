"""Paper 5's figures from the result files (Figs. 1-5). Apart from the tables so that a table job loads no
matplotlib.

* **Figures** (their series: `acceptance_series`, `throughput_series`, `regimes_series`): 1, 4, 5: the
  acceptance frontier of one task (history rows per depth cap, the Pareto frontier of the biased values, self
  values, the published default); 2 (and the second panels of 4, 5): the throughput frontier (modeled tok/s per
  candidate tree by depth cap, the hull, EntMTP*, the default, greedy); 3: (a) Pearson r of the regime features
  against the accept length, per task, (b) the classifier's AUROC per task.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from ...io import read_json
from ...results.figures import save_figure, style
from .bank import ROOT_ONLY
from .frontier import pareto
from .regimes import FEATURES


@dataclass
class Series:
    """One series of a figure panel: `line` (x, y), `points`, `star` (a published tree), `ring` (EntMTP*) or
    `hline` (y[0] across the panel)."""

    x: list[float]
    y: list[float]
    kind: str = "line"


def acceptance_series(search: Mapping[str, Any], self_data: Mapping[str, Any]) -> dict[str, Series]:
    """Figs. 1, 4, 5 (first panel): draft nodes against mean accept length (bonus excluded): the search's history
    per depth cap (`D = d`, the biased what-if values), the Pareto frontier of the biased values over all depths
    (`Pareto (biased)`), every re-scored tree's own-rollout value (`self rollout`), and each published tree's (by
    its id)."""
    out: dict[str, Series] = {}
    for d, rows in search["per_depth_history"].items():
        if rows:
            out[f"D = {d}"] = Series([r["n_nodes"] for r in rows], [r["mean_accept"] for r in rows])
    searched = sorted((r for r in self_data["rows"] if r["biased"] is not None), key=lambda r: r["n_nodes"])
    if searched:
        front = pareto(searched, "biased")
        out["Pareto (biased)"] = Series([r["n_nodes"] for r in front], [r["biased"] for r in front])
        out["self rollout"] = Series([r["n_nodes"] for r in searched], [r["self"] for r in searched], "points")
    for r in self_data["rows"]:
        if r["biased"] is None:
            out[r["id"]] = Series([r["n_nodes"]], [r["self"]], "star")
    return out


def throughput_series(thr: Mapping[str, Any]) -> dict[str, Series]:
    """Fig. 2 (and the second panels of 4, 5): draft nodes against modeled tok/s (prefill included): each depth
    cap's searched candidates (`D = d`), the hull, EntMTP* (`EntMTP* (n nodes)`), each published tree (its id)
    and greedy (a horizontal line)."""
    rows = thr["rows"]
    out: dict[str, Series] = {}
    by_depth: dict[Any, list[dict]] = {}
    for r in rows:
        if r.get("biased") is not None:
            by_depth.setdefault(r["depth"], []).append(r)
    for d, rs in sorted(by_depth.items()):
        rs = sorted(rs, key=lambda r: r["n_nodes"])
        out[f"D = {d}"] = Series([r["n_nodes"] for r in rs], [r["modeled_tokens_per_s"] for r in rs])
    front = sorted((r for r in rows if r["id"] in thr["hull"]), key=lambda r: r["n_nodes"])
    out["hull"] = Series([r["n_nodes"] for r in front], [r["modeled_tokens_per_s"] for r in front])
    best = next(r for r in rows if r["id"] == thr["best"])
    out[f"EntMTP* ({best['n_nodes']} nodes)"] = Series([best["n_nodes"]], [best["modeled_tokens_per_s"]], "ring")
    for r in rows:
        if r.get("biased") is None and r["id"] != ROOT_ONLY:
            out[r["id"]] = Series([r["n_nodes"]], [r["modeled_tokens_per_s"]], "star")
    out["greedy"] = Series([], [thr["greedy"]["modeled_tokens_per_s"]], "hline")
    return out


def regimes_series(summaries: Mapping[str, dict]) -> tuple[list[str], np.ndarray, list[float | None]]:
    """Fig. 3: the tasks, (a) Pearson r of every regime feature against the accept length [tasks x features] (nan
    where undefined), (b) the low-acceptance classifier's AUROC per task."""
    tasks = list(summaries)
    grid = np.array(
        [[((summaries[t] or {}).get("pearson") or {}).get(f) for f in FEATURES] for t in tasks], dtype=float
    )
    auc = [((summaries[t] or {}).get("classifier") or {}).get("auroc") for t in tasks]
    return tasks, grid, auc


def _figure(width: float, height: float, panels: int, **kw: Any) -> tuple[Figure, list]:
    with style():
        fig = Figure(figsize=(width, height), layout="constrained")
        return fig, list(np.atleast_1d(fig.subplots(1, panels, **kw)))


def _draw(ax, series: Mapping[str, Series], title: str, ylabel: str, depth_line: str) -> None:
    """The series of one frontier panel (log nodes; symlog when the root-only tree sits at 0); `depth_line`: the
    line style of the per-depth series."""
    with style():
        for label, sr in series.items():
            if sr.kind == "line" and label.startswith("D = "):
                ax.plot(sr.x, sr.y, depth_line, marker="o", ms=3, lw=0.8, label=label)
            elif sr.kind == "line":
                ax.plot(sr.x, sr.y, "k--" if label.startswith("Pareto") else "k-", lw=1.0, label=label)
            elif sr.kind == "points":
                ax.scatter(sr.x, sr.y, marker="x", color="k", s=14, label=label)
            elif sr.kind == "star":
                ax.scatter(sr.x, sr.y, marker="*", s=60, color="tab:red", label=label)
            elif sr.kind == "ring":
                ax.scatter(sr.x, sr.y, s=50, facecolors="none", edgecolors="k", label=label)
            else:
                ax.axhline(sr.y[0], color="grey", lw=0.8, ls=":", label=label)
        if any(0 in sr.x for sr in series.values()):  # the root-only tree (include_greedy) sits at 0 nodes
            ax.set_xscale("symlog", linthresh=1)
            ax.set_xlim(left=-0.4)  # no negative decade
        else:
            ax.set_xscale("log")
        ax.set_xlabel("draft nodes")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.legend(fontsize=6)


def frontier_figure(
    kind: str, files: Mapping[str, str], title: str, png: str | os.PathLike, pdf: str | os.PathLike
) -> None:
    """`kind`: acceptance (Fig. 1), throughput (Fig. 2) or both (Figs. 4-5, two panels)."""
    panels = ["acceptance", "throughput"] if kind == "both" else [kind]
    fig, axes = _figure(4.5 * len(panels), 3.4, len(panels))
    for a, p in zip(axes, panels):
        if p == "acceptance":
            series = acceptance_series(read_json(files["search"]), read_json(files["self"]))
            _draw(a, series, f"{title}: acceptance frontier", "mean accept length (bonus excl.)", "-")
        else:
            series = throughput_series(read_json(files["throughput"]))
            _draw(a, series, f"{title}: throughput frontier", "modeled tokens / s (prefill incl.)", "--")
    save_figure(fig, png, pdf)


def regimes_figure(
    summaries: Mapping[str, dict], titles: Mapping[str, str], png: str | os.PathLike, pdf: str | os.PathLike
) -> None:
    """Fig. 3: (a) Pearson r heatmap (tasks x features), (b) AUROC per task (`regimes_series`)."""
    fig, (a, b) = _figure(9.0, 3.2, 2, width_ratios=[3, 1])
    tasks, grid, auc = regimes_series(summaries)
    with style():
        im = a.imshow(grid, cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto")
        a.set_xticks(range(len(FEATURES)), [f.replace("_", " ") for f in FEATURES], rotation=30, ha="right")
        a.set_yticks(range(len(tasks)), [titles[t] for t in tasks])
        a.grid(False)
        for i in range(len(tasks)):
            for j in range(len(FEATURES)):
                if not np.isnan(grid[i, j]):
                    a.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center", fontsize=6)
        fig.colorbar(im, ax=a, shrink=0.8, label="Pearson r (next accept length)")
        a.set_title("(a) regime features vs accept length")
        b.bar(range(len(tasks)), [np.nan if v is None else v for v in auc], color="tab:blue")
        b.axhline(0.5, color="grey", lw=0.8, ls=":")
        b.set_xticks(range(len(tasks)), [titles[t] for t in tasks], rotation=30, ha="right")
        b.set_ylim(0, 1)
        b.set_ylabel("AUROC (held-out trajectories)")
        b.set_title("(b) low-acceptance classifier")
    save_figure(fig, png, pdf)
