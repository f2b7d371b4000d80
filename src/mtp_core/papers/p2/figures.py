"""Paper 2's figures from the result files named by `plan.P2Plan.report_params`. Each figure's numbers come from a
`*_series` function (what the figure plots, tested against hand-computed values), drawn by its figure function.

* Figs 3, 11-14 (`loop_figure`): CAR and/or AR per head index under training-free loops (D drafts from K heads,
  depth d running head ((d-1) mod K)+1) or continued pre-training; Fig. 3 on one benchmark (a: CAR, b: AR),
  Figs 11 / 13 / 14 CAR and Fig. 12 AR on every benchmark.
* Fig. 4 (`speed_figure`): speedup over the baseline (1-head MTP) per benchmark and strategy, measured (bars) and
  modeled (markers), one panel per decoding protocol (with and without a KV cache). Fig. 5 (`strategies_figure`):
  (a) CAR per head index over all benchmarks (pooled, `report.pooled_sets`), (b) speedup per strategy over all
  benchmarks.
* Fig. 6: the main head's cumulative Top-N probability mass. Figs 7 / 10: a run's training curves (main CE and
  each head's CE). Fig. 9: final validation losses of the ablations (main head, head 1), better / worse than the
  first (reference) run.
"""

from __future__ import annotations

import csv as csvlib
from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure

from ...io import read_json
from ...results.figures import save_figure, style
from ...train.curves import read_curves
from .counters import pooled
from .report import pooled_sets, run_counters, speed_frame

LOOP_METRICS = {"fig3": ("car", "ar"), "fig11": ("car",), "fig12": ("ar",), "fig13": ("car",), "fig14": ("car",)}
NAMES = {"car": "cumulative acceptance rate (CAR)", "ar": "acceptance rate (AR)"}
FINAL_LOSSES = (("loss_main", "(a) main head"), ("ce@1", "(b) MTP head 1"))


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
    """CAR or AR per head index of `run` at `depth` drafts on prompt set `ps` (None: every benchmark, pooled)."""
    f = params["runs"][run]
    c = pooled(run_counters(f, ps, depth)) if ps else pooled_sets(f, params["prompt_sets"], depth)
    return getattr(c, metric)


def _label(params: dict, run: str, depth: int | None) -> str:
    f = params["runs"][run]
    k = f["heads"]
    return f"{f['title']} {k}→{depth}" if depth and depth > k else f"{f['title']} K={k}"


def loop_series(params: dict) -> dict[tuple[str, str], dict[str, np.ndarray]]:
    """(metric, prompt set) panel -> curve label -> CAR or AR per head index 1..D (fractions)."""
    spec = params["spec"]
    sets = [spec["prompt_set"]] if spec.get("prompt_set") else params["prompt_sets"]
    return {
        (m, ps): {
            _label(params, r, spec.get("depth")): _curve(params, r, ps, spec.get("depth"), m) for r in spec["runs"]
        }
        for m in LOOP_METRICS[params["name"]]
        for ps in sets
    }


def loop_figure(params: dict, png: str, pdf: str) -> None:
    series = loop_series(params)
    fig, axes = _panels(len(series))
    with style():
        for ax, ((metric, ps), curves) in zip(axes, series.items()):
            for label, y in curves.items():
                x = np.arange(1, len(y) + 1)
                ax.plot(x, 100 * y, marker="o", markersize=3, linewidth=1, label=label)
            for k in {params["runs"][r]["heads"] for r in params["spec"]["runs"]}:
                ax.axvline(k + 0.5, color="0.7", linewidth=0.6, linestyle=":")
            ax.set_title(f"{ps}: {metric.upper()}")
            ax.set_xlabel("MTP head index")
            ax.set_ylabel(f"{NAMES[metric]} (%)")
            ax.set_ylim(0, 100)
        axes[0].legend(fontsize=6)
    save_figure(fig, png, pdf)


def speed_series(params: dict) -> dict[str, dict]:
    """Protocol -> {sets (the benchmarks, then "all": their mean, `report.speed_frame`), bars: row title -> speedup
    vs the baseline per set, modeled: row title -> the modeled speedup over all benchmarks, pooled (None where not
    modeled)}."""
    frame = speed_frame(params)
    out: dict[str, dict] = {}
    for protocol, rows in frame.groupby("protocol", sort=False):
        sets = [s for s in dict.fromkeys(rows["set"]) if s != "all"] + ["all"]
        bars, modeled = {}, {}
        for label in dict.fromkeys(rows["label"]):
            sub = rows[rows["label"] == label].set_index("set")
            title = sub.loc["all", "title"]
            bars[title] = [float(sub.loc[s, "speedup_vs_baseline"]) for s in sets]
            mod = sub.loc["all", "modeled_speedup_vs_baseline"]
            modeled[title] = None if mod is None or not np.isfinite(mod) else float(mod)
        out[str(protocol)] = {"sets": sets, "bars": bars, "modeled": modeled}
    return out


def speed_figure(params: dict, png: str, pdf: str) -> None:
    series = speed_series(params)
    fig, axes = _panels(len(series), 6.5, 3.2)
    with style():
        for ax, (protocol, s) in zip(axes, series.items()):
            width = 0.8 / max(1, len(s["bars"]))
            for j, (title, ys) in enumerate(s["bars"].items()):
                xs = [i - 0.4 + (j + 0.5) * width for i in range(len(s["sets"]))]
                ax.bar(xs, ys, width, label=title)
                if s["modeled"][title] is not None:
                    ax.plot([xs[-1]], [s["modeled"][title]], marker="D", color="k", markersize=3)
            ax.axhline(1.0, color="0.5", linewidth=0.6)
            ax.set_xticks(range(len(s["sets"])), ["mean" if x == "all" else x for x in s["sets"]])
            ax.set_title(protocol)
            ax.set_ylabel(f"speedup vs {params['speed']['baseline']} (◆ modeled)")
            ax.legend(fontsize=6, ncols=min(4, len(s["bars"])))
    save_figure(fig, png, pdf)


def strategies_series(params: dict) -> tuple[dict[str, np.ndarray], dict[str, dict[str, float]]]:
    """(a) strategy title -> CAR per head index over every benchmark (pooled); (b) protocol -> strategy title ->
    speedup vs the baseline averaged across the benchmarks (Fig. 5(b))."""
    car = {r["title"]: _curve(params, r["run"], None, r["depth"], "car") for r in params["speed"]["rows"]}
    frame = speed_frame(params)
    overall = frame[frame["set"] == "all"]
    speed = {
        str(p): dict(zip(rows["title"], rows["speedup_vs_baseline"].astype(float)))
        for p, rows in overall.groupby("protocol", sort=False)
    }
    return car, speed


def strategies_figure(params: dict, png: str, pdf: str) -> None:
    car, speed = strategies_series(params)
    fig, (a, b) = _panels(2, 3.6, 2.8)
    with style():
        for title, y in car.items():
            a.plot(np.arange(1, len(y) + 1), 100 * y, marker="o", markersize=3, linewidth=1, label=title)
        a.set_xlabel("MTP head index")
        a.set_ylabel("CAR over all benchmarks (%)")
        a.legend(fontsize=6)
        width = 0.8 / max(1, len(speed))
        titles = list(dict.fromkeys(t for s in speed.values() for t in s))
        for j, (protocol, s) in enumerate(speed.items()):
            xs = [i - 0.4 + (j + 0.5) * width for i in range(len(titles))]
            b.bar(xs, [s.get(t, np.nan) for t in titles], width, label=protocol)
        b.set_xticks(range(len(titles)), titles, rotation=30, ha="right")
        b.set_ylabel(f"speedup vs {params['speed']['baseline']}")
        b.legend(fontsize=6)
    save_figure(fig, png, pdf)


def topn_series(params: dict) -> tuple[np.ndarray, np.ndarray]:
    """(N, the main head's mean cumulative probability of its Top-N tokens)."""
    with open(params["topn"], encoding="utf-8") as f:
        rows = list(csvlib.DictReader(f))
    return np.array([int(r["topn"]) for r in rows]), np.array([float(r["mass"]) for r in rows])


def topn_figure(params: dict, png: str, pdf: str) -> None:
    n, m = topn_series(params)
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


def curves_series(params: dict) -> tuple[list[float], dict[str, list[float | None]]]:
    """(steps, curve label -> training CE per step: the main head, then each MTP head that logged one)."""
    f = params["runs"][params["spec"]["run"]]
    raw = read_curves(f["record"].rsplit("/", 1)[0] + "/curves.csv")
    rows = [{k: float(v) if v not in (None, "") else None for k, v in r.items()} for r in raw]
    curves: dict[str, list[float | None]] = {"main head": [r["loss_main"] for r in rows]}
    for k in range(1, f["heads"] + 1):
        ys = [r.get(f"ce@{k}") for r in rows]
        if any(y is not None for y in ys):
            curves[f"MTP head {k}"] = ys
    return [r["step"] for r in rows], curves


def curves_figure(params: dict, png: str, pdf: str) -> None:
    f = params["runs"][params["spec"]["run"]]
    steps, curves = curves_series(params)
    fig, axes = _panels(1, 4.5, 3.0)
    ax = axes[0]
    with style():
        for label, ys in curves.items():
            ax.plot(steps, ys, label=label, **({"color": "k"} if label == "main head" else {}))
        ax.set_xlabel("step")
        ax.set_ylabel("training loss (CE)")
        ax.set_title(f"{f['title']} K={f['heads']}: final main {curves['main head'][-1]:.3f}")
        ax.legend(fontsize=6)
    save_figure(fig, png, pdf)


def final_losses_series(params: dict) -> dict[str, dict[str, tuple[float, str]]]:
    """Metric (loss_main, ce@1) -> run -> (its validation CE, "reference" | "lower" | "higher" than the first
    run's)."""
    runs: Sequence[str] = params["spec"]["runs"]
    vals = {r: read_json(params["runs"][r]["validation"])["metrics"] for r in runs}
    out = {}
    for key, _ in FINAL_LOSSES:
        ref = vals[runs[0]][key]
        out[key] = {runs[0]: (ref, "reference")} | {
            r: (vals[r][key], "lower" if vals[r][key] < ref else "higher") for r in runs[1:]
        }
    return out


def final_losses_figure(params: dict, png: str, pdf: str) -> None:
    series = final_losses_series(params)
    colors = {"reference": "0.5", "lower": "tab:orange", "higher": "tab:green"}
    first = params["runs"][params["spec"]["runs"][0]]["title"]
    fig, axes = _panels(2, 3.6, 2.8)
    with style():
        for ax, (key, title) in zip(axes, FINAL_LOSSES):
            runs = list(series[key])
            ys = [series[key][r][0] for r in runs]
            ax.bar(range(len(runs)), ys, color=[colors[series[key][r][1]] for r in runs])
            ax.set_xticks(range(len(runs)), [params["runs"][r]["title"] for r in runs], rotation=40, ha="right")
            lo, hi = min(ys), max(ys)
            ax.set_ylim(lo - 0.1 * (hi - lo + 1e-3), hi + 0.1 * (hi - lo + 1e-3))
            ax.set_title(f"{title}: validation CE (orange: lower than {first})")
    save_figure(fig, png, pdf)


FIGURES = {
    "fig3": loop_figure,
    "fig11": loop_figure,
    "fig12": loop_figure,
    "fig13": loop_figure,
    "fig14": loop_figure,
    "fig4": speed_figure,
    "fig8": speed_figure,  # the A1B MoE runs against the 2B dense MTP K = 1 (App. E.1)
    "fig5": strategies_figure,
    "fig6": topn_figure,
    "fig7": curves_figure,
    "fig10": curves_figure,
    "fig9": final_losses_figure,
}


def make_figure(params: dict, png: str, pdf: str) -> None:
    """Figure `params["name"]` (`P2Plan.report_params`) into `png` and `pdf`."""
    if params["name"] not in FIGURES:
        raise ValueError(f"paper 2 has no figure {params['name']!r}")
    FIGURES[params["name"]](params, png, pdf)
