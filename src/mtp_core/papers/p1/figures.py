"""Paper 1's figures from result JSONs (Figures 5 and 7-11: `pareto_figure`, `dynamics_figure`) and from the
Figure-6 analysis CSV (`confidence_figure`), over the frame of `report.p1_frame`. Apart from the tables so that a
table job loads no matplotlib."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ...results.figures import save_figure, style
from .report import BASELINE_LABEL, p1_frame, short_label


def _pareto_panel(ax: Any, sub: pd.DataFrame, baseline: pd.DataFrame, title: str, ylabel: str) -> None:
    static = sub[sub["kind"] == "static"].sort_values("k")
    conf = sub[sub["kind"] == "conf"].sort_values("tau", ascending=False)
    for part, name, marker in ((static, "Static", "s"), (conf, "ConfAdapt", "o")):
        if part.empty:
            continue
        ax.errorbar(
            part["effective_k"],
            part["value"],
            yerr=part["stderr"],
            marker=marker,
            markersize=3,
            capsize=2,
            linewidth=1,
            label=name,
        )
        for xv, yv, r in zip(part["effective_k"], part["value"], part.to_dict("records")):
            ax.annotate(
                short_label(r["kind"], r["k"], r["tau"]),
                (xv, yv),
                textcoords="offset points",
                xytext=(3, 3),
                fontsize=5,
            )
    if not baseline.empty:
        ax.errorbar(
            baseline["effective_k"],
            baseline["value"],
            yerr=baseline["stderr"],
            marker="*",
            markersize=7,
            linestyle="none",
            color="black",
            label=BASELINE_LABEL,
        )
    if sub.empty and baseline.empty:
        ax.text(0.5, 0.5, "no results", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("acceleration factor (effective k)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()


def _ylabel(long: pd.DataFrame, task: str | None) -> str:
    if long.empty:
        return "accuracy (%)"
    r = long.iloc[0]
    name = str(r["metric"]).split(",", 1)[0] if r["metric"] else "accuracy"
    return f"{task or r['task']}: {name} (%)" if r["percent"] else f"{task or r['task']}: {name}"


def pareto_figure(
    frame: pd.DataFrame,
    png: str | os.PathLike,
    pdf: str | os.PathLike,
    *,
    runs: Sequence[str] | None = None,
    task: str | None = None,
    metric: str | None = None,
    titles: Mapping[str, str] | None = None,
    title: str | None = None,
) -> Figure:
    """Figures 5 and 9: accuracy vs acceleration (effective k) of the final students, Static k and ConfAdapt τ
    curves plus the step-0 baseline; one panel per run."""
    long = p1_frame(frame, {task: metric} if task else None)
    if task:
        long = long[long["task"] == task]
    long = long[long["step"].isna() | (long["kind"] == "baseline")]
    trained = long[long["kind"] != "baseline"]
    runs = list(runs) if runs else list(dict.fromkeys(trained["run"]))
    titles = dict(titles or {})
    with style():
        fig = Figure(figsize=(4.2 * max(1, len(runs)), 3.4), layout="constrained")
        axes = fig.subplots(1, max(1, len(runs)), squeeze=False)[0]
        for ax, run in zip(axes, runs):
            sub = trained[trained["run"] == run]
            model = sub["model"].iloc[0] if len(sub) else None
            base = long[(long["kind"] == "baseline") & (long["model"] == model)]
            _pareto_panel(ax, sub, base, f"{titles.get(run, run)} ({model})", _ylabel(long, task))
        if title:
            fig.suptitle(title)
    save_figure(fig, png, pdf)
    return fig


def dynamics_figure(
    frame: pd.DataFrame,
    png: str | os.PathLike,
    pdf: str | os.PathLike,
    *,
    run: str | None = None,
    task: str | None = None,
    metric: str | None = None,
    final_step: int | None = None,
    titles: Mapping[str, str] | None = None,
    title: str | None = None,
) -> Figure:
    """Figures 7-8 and 10-11: (left) the metric and (middle) the acceleration factor over training steps, one line
    per decoder setting evaluated at the checkpoints (`<run>@step<N>`, plus the final model at `final_step`);
    (right) the Pareto view of the final model with all settings."""
    long = p1_frame(frame, {task: metric} if task else None)
    if task:
        long = long[long["task"] == task]
    trained = long[long["kind"] != "baseline"]
    run = run or (trained["run"].iloc[0] if len(trained) else None)
    trained = trained[trained["run"] == run].copy()
    last = int(final_step) if final_step is not None else int(np.nanmax(trained["step"].to_numpy(float), initial=0)) + 1
    trained["step"] = trained["step"].fillna(last).astype(int)
    checkpointed = set(trained.loc[trained["step"] != last, "setting"])
    model = trained["model"].iloc[0] if len(trained) else None
    name = f"{dict(titles or {}).get(run, run)} ({model})"
    ylabel = _ylabel(trained, task)
    with style():
        fig = Figure(figsize=(12, 3.4), layout="constrained")
        ax_acc, ax_k, ax_p = fig.subplots(1, 3)
        for setting, g in sorted(trained.groupby("setting"), key=lambda kv: kv[1]["order"].iloc[0]):
            if setting not in checkpointed:
                continue
            g = g.sort_values("step")
            ls = "-" if g["kind"].iloc[0] == "static" else "--"
            ax_acc.plot(g["step"], g["value"], ls, marker="o", markersize=3, linewidth=1, label=setting)
            ax_k.plot(g["step"], g["effective_k"], ls, marker="o", markersize=3, linewidth=1, label=setting)
        for ax, yl in ((ax_acc, ylabel), (ax_k, "acceleration factor (effective k)")):
            ax.set_xlabel("training step")
            ax.set_ylabel(yl)
            if not checkpointed:
                ax.text(0.5, 0.5, "no checkpoint results", ha="center", va="center", transform=ax.transAxes)
        ax_acc.set_title(f"{name}: accuracy over training")
        ax_k.set_title("acceleration over training")
        ax_k.legend(fontsize=5, ncols=2)
        final = trained[trained["step"] == last]
        _pareto_panel(ax_p, final, long.iloc[0:0], f"final model (step {last})", ylabel)
        if title:
            fig.suptitle(title)
    save_figure(fig, png, pdf)
    return fig


def confidence_figure(
    analysis: pd.DataFrame,
    png: str | os.PathLike,
    pdf: str | os.PathLike,
    *,
    bins: int = 10,
    title: str | None = None,
) -> Figure:
    """Figure 6: teacher loss of the student's k-token rollouts (lower is better) against the student's mean
    top-1 confidence, one dot per region whose rollout lies in the response (each context once,
    `confidence.response_regions`), with the binned mean ± standard error; n and correlations in the title."""
    from .confidence import binned, correlations, response_regions

    analysis = response_regions(analysis)
    c = correlations(analysis)
    b = binned(analysis, bins)
    with style():
        fig = Figure(figsize=(4.5, 3.5), layout="constrained")
        ax = fig.add_subplot()
        ax.scatter(analysis["confidence"], analysis["teacher_loss"], s=3, alpha=0.25, linewidths=0, label="regions")
        if not b.empty:
            ax.errorbar(
                b["confidence_mean"],
                b["teacher_loss_mean"],
                yerr=b["teacher_loss_sem"],
                marker="o",
                markersize=3,
                capsize=2,
                color="black",
                linewidth=1,
                label=f"{len(b)} quantile bins",
            )
        else:
            ax.text(0.5, 0.5, "no regions", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlabel("student confidence (mean top-1 probability over k positions)")
        ax.set_ylabel("teacher loss of the rollout (mean NLL)")
        k = sorted(set(analysis["k"])) if len(analysis) else []
        ax.set_title(
            (title + "\n" if title else "") + f"k={','.join(map(str, k))}, n={c['n']} response regions, "
            f"Pearson r={c['pearson']:.2f}, Spearman ρ={c['spearman']:.2f}"
        )
        ax.legend()
    save_figure(fig, png, pdf)
    return fig


__all__ = ["confidence_figure", "dynamics_figure", "pareto_figure"]
