"""Paper 2's figures from the result files named by `plan.report_params`.

* Figs 3, 11-14 (`loop_figure`): CAR and/or AR per head index under training-free loops (D drafts from K heads,
  depth d running head ((d-1) mod K)+1) or continued pre-training; Fig. 3 on one benchmark (a: CAR, b: AR),
  Figs 11 / 13 / 14 CAR and Fig. 12 AR on every benchmark.
* Fig. 4 (`speed_figure`): speedup over the baseline (1-head MTP) per benchmark and strategy, measured (bars) and
  modeled (markers). Fig. 5 (`strategies_figure`): (a) CAR per head index averaged over benchmarks, (b) mean
  speedup per strategy.
* Fig. 6: the main head's cumulative Top-N probability mass. Figs 7 / 10: a run's training curves (main CE and
  each head's CE). Fig. 9: final validation losses of the ablations (main head, head 1), better / worse than the
  first (reference) run.
"""

from __future__ import annotations

import csv as csvlib
from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure

from ...report.figures import save_figure, style
from ...train.curves import read_curves
from .acceptance import pooled
from .report import load_json, prompt_counters, speed_frame

LOOP_METRICS = {"fig3": ("car", "ar"), "fig11": ("car",), "fig12": ("ar",), "fig13": ("car",), "fig14": ("car",)}
NAMES = {"car": "cumulative acceptance rate (CAR)", "ar": "acceptance rate (AR)"}


def _panels(n: int, width: float = 3.0, height: float = 2.6) -> tuple[Figure, list]:
    cols = min(n, 4)
    rows = (n + cols - 1) // cols
    with style():
        fig = Figure(figsize=(width * cols, height * rows), layout="constrained")
        axes = fig.subplots(rows, cols, squeeze=False).flatten().tolist()
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


def _curve(params: dict, run: str, ps: str | None, depth: int | None, metric: str) -> np.ndarray:
    """CAR or AR per head index of `run` at `depth` drafts on prompt set `ps` (None: mean over benchmarks)."""
    f = params["runs"][run]
    d = str(depth or f["heads"])
    sets = [ps] if ps else params["prompt_sets"]
    vals = [getattr(pooled(prompt_counters(f["acceptance"][s][d])), metric) for s in sets]
    return np.mean(vals, axis=0)


def _label(params: dict, run: str, depth: int | None) -> str:
    f = params["runs"][run]
    k = f["heads"]
    return f"{f['title']} {k}→{depth}" if depth and depth > k else f"{f['title']} K={k}"


def loop_figure(params: dict, png: str, pdf: str) -> None:
    spec, name = params["spec"], params["name"]
    metrics = LOOP_METRICS[name]
    sets = [spec["prompt_set"]] if spec.get("prompt_set") else params["prompt_sets"]
    panels = [(m, s) for m in metrics for s in sets]
    fig, axes = _panels(len(panels))
    with style():
        for ax, (metric, ps) in zip(axes, panels):
            for run in spec["runs"]:
                y = 100 * _curve(params, run, ps, spec.get("depth"), metric)
                ax.plot(
                    np.arange(1, len(y) + 1),
                    y,
                    marker="o",
                    markersize=3,
                    linewidth=1,
                    label=_label(params, run, spec.get("depth")),
                )
            k_marks = {params["runs"][r]["heads"] for r in spec["runs"]}
            for k in k_marks:
                ax.axvline(k + 0.5, color="0.7", linewidth=0.6, linestyle=":")
            ax.set_title(f"{ps}: {metric.upper()}")
            ax.set_xlabel("MTP head index")
            ax.set_ylabel(f"{NAMES[metric]} (%)")
            ax.set_ylim(0, 100)
        axes[0].legend(fontsize=6)
    save_figure(fig, png, pdf)


def speed_figure(params: dict, png: str, pdf: str) -> None:
    frame = speed_frame(params)
    per_set = frame[frame["set"] != "all"]
    sets = list(dict.fromkeys(per_set["set"])) + ["all"]
    labels = list(dict.fromkeys(frame["label"]))
    overall = frame[frame["set"] == "all"].set_index("label")
    fig, axes = _panels(1, 6.5, 3.2)
    ax = axes[0]
    width = 0.8 / max(1, len(labels))
    with style():
        for j, lab in enumerate(labels):
            sub = frame[frame["label"] == lab].set_index("set")
            xs = [i - 0.4 + (j + 0.5) * width for i in range(len(sets))]
            ax.bar(xs, [sub.loc[s, "speedup_vs_baseline"] for s in sets], width, label=overall.loc[lab, "title"])
            mod = overall.loc[lab, "modeled_speedup_vs_baseline"]
            if mod is not None and np.isfinite(mod):
                ax.plot([xs[-1]], [mod], marker="D", color="k", markersize=3)
        ax.axhline(1.0, color="0.5", linewidth=0.6)
        ax.set_xticks(range(len(sets)), sets)
        ax.set_ylabel(f"speedup vs {params['speed']['baseline']} (◆ modeled)")
        ax.legend(fontsize=6, ncols=min(4, len(labels)))
    save_figure(fig, png, pdf)


def strategies_figure(params: dict, png: str, pdf: str) -> None:
    frame = speed_frame(params)
    overall = frame[frame["set"] == "all"]
    fig, (a, b) = _panels(2, 3.6, 2.8)
    with style():
        for r in params["speed"]["rows"]:
            y = 100 * _curve(params, r["run"], None, r["depth"], "car")
            a.plot(np.arange(1, len(y) + 1), y, marker="o", markersize=3, linewidth=1, label=r["title"])
        a.set_xlabel("MTP head index")
        a.set_ylabel("mean CAR (%)")
        a.legend(fontsize=6)
        b.bar(range(len(overall)), overall["speedup_vs_baseline"])
        b.set_xticks(range(len(overall)), overall["title"], rotation=30, ha="right")
        b.set_ylabel(f"speedup vs {params['speed']['baseline']}")
    save_figure(fig, png, pdf)


def topn_figure(params: dict, png: str, pdf: str) -> None:
    with open(params["topn"], encoding="utf-8") as f:
        rows = list(csvlib.DictReader(f))
    n = np.array([int(r["topn"]) for r in rows])
    m = np.array([float(r["mass"]) for r in rows])
    fig, axes = _panels(1, 4.5, 3.0)
    ax = axes[0]
    with style():
        ax.plot(n, m, marker="o", markersize=3)
        for mark in (1000, 10000):
            if mark in n:
                v = m[list(n).index(mark)]
                ax.annotate(
                    f"Top-{mark}: {v:.4f}", (mark, v), textcoords="offset points", xytext=(-40, -14), fontsize=6
                )
        ax.set_xscale("log")
        ax.set_xlabel("Top-N tokens of the main head")
        ax.set_ylabel("cumulative probability")
        ax.set_title(f"{params['base']['model']}: main-head probability mass")
    save_figure(fig, png, pdf)


def curves_figure(params: dict, png: str, pdf: str) -> None:
    run = params["spec"]["run"]
    f = params["runs"][run]
    raw = read_curves(f["record"].rsplit("/", 1)[0] + "/curves.csv")
    rows = [{k: float(v) if v not in (None, "") else None for k, v in r.items()} for r in raw]
    steps = [r["step"] for r in rows]
    fig, axes = _panels(1, 4.5, 3.0)
    ax = axes[0]
    with style():
        ax.plot(steps, [r["loss_main"] for r in rows], label="main head", color="k")
        for k in range(1, f["heads"] + 1):
            ys = [r.get(f"ce@{k}") for r in rows]
            if any(y is not None for y in ys):
                ax.plot(steps, ys, label=f"MTP head {k}")
        ax.set_xlabel("step")
        ax.set_ylabel("training loss (CE)")
        ax.set_title(f"{f['title']} K={f['heads']}: final main {rows[-1]['loss_main']:.3f}")
        ax.legend(fontsize=6)
    save_figure(fig, png, pdf)


def final_losses_figure(params: dict, png: str, pdf: str) -> None:
    runs: Sequence[str] = params["spec"]["runs"]
    vals = {r: load_json(params["runs"][r]["validation"])["metrics"] for r in runs}
    fig, axes = _panels(2, 3.6, 2.8)
    with style():
        for ax, key, title in zip(axes, ("loss_main", "ce@1"), ("(a) main head", "(b) MTP head 1")):
            ref = vals[runs[0]][key]
            ys = [vals[r][key] for r in runs]
            colors = ["0.5"] + ["tab:orange" if y < ref else "tab:green" for y in ys[1:]]
            ax.bar(range(len(runs)), ys, color=colors)
            ax.set_xticks(range(len(runs)), [params["runs"][r]["title"] for r in runs], rotation=40, ha="right")
            lo, hi = min(ys), max(ys)
            ax.set_ylim(lo - 0.1 * (hi - lo + 1e-3), hi + 0.1 * (hi - lo + 1e-3))
            ax.set_title(f"{title}: validation CE (orange: lower than {params['runs'][runs[0]]['title']})")
    save_figure(fig, png, pdf)


FIGURES = {
    "fig3": loop_figure,
    "fig11": loop_figure,
    "fig12": loop_figure,
    "fig13": loop_figure,
    "fig14": loop_figure,
    "fig4": speed_figure,
    "fig5": strategies_figure,
    "fig6": topn_figure,
    "fig7": curves_figure,
    "fig10": curves_figure,
    "fig9": final_losses_figure,
}


def make_figure(params: dict, png: str, pdf: str) -> None:
    """Figure `params["name"]` (plan.report_params) into `png` and `pdf`."""
    if params["name"] not in FIGURES:
        raise ValueError(f"paper 2 has no figure {params['name']!r}")
    FIGURES[params["name"]](params, png, pdf)
