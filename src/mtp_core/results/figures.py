"""Figures: deterministic PNG + PDF (no timestamps), a shared style, grouped bars and trade-off curves, and the
foundation's figures from result JSONs (`make_figure`, what the workflow script `make_figures.py` calls).

Figures are built on `matplotlib.figure.Figure` directly (Agg canvas, no pyplot state), so nothing here depends
on or changes the global backend.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import matplotlib as mpl
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ..io import atomic_path
from .read import load_results

STYLE = {
    "font.size": 8,
    "axes.titlesize": 9,
    "axes.labelsize": 8,
    "legend.fontsize": 7,
    "legend.frameon": False,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "savefig.dpi": 150,
    "savefig.bbox": "tight",
    "svg.hashsalt": "mtp-repro",
}


@contextmanager
def style() -> Iterator[None]:
    """The shared figure style (also used while saving, since some rcParams apply at draw time)."""
    with mpl.rc_context(STYLE):
        yield


def new_figure(width: float = 6.0, height: float = 3.2) -> tuple[Figure, Axes]:
    with style():
        fig = Figure(figsize=(width, height), layout="constrained")
        return fig, fig.add_subplot()


def save_figure(fig: Figure, png: str | os.PathLike, pdf: str | os.PathLike | None = None) -> None:
    """Write `fig` as PNG (and PDF), atomically and byte-reproducibly (no software/date metadata)."""
    with style():
        with atomic_path(png) as tmp:
            fig.savefig(tmp, format="png", metadata={"Software": None})
        if pdf is not None:
            with atomic_path(pdf) as tmp:
                fig.savefig(tmp, format="pdf", metadata={"CreationDate": None, "ModDate": None})


def grouped_bars(
    frame: pd.DataFrame,
    group: str,
    bar: str,
    value: str,
    annotate: str | None = None,
    annotate_fmt: str = "{:.2f}",
    ylabel: str | None = None,
    title: str | None = None,
) -> Figure:
    """One cluster per `group` value and one bar per `bar` value (both in order of first appearance), height
    `value`; `annotate` column values are printed above the bars."""
    fig, ax = new_figure()
    groups, bars = list(dict.fromkeys(frame[group])), list(dict.fromkeys(frame[bar]))
    width = 0.8 / max(1, len(bars))
    with style():
        for j, b in enumerate(bars):
            sub = frame[frame[bar] == b]
            xs = [groups.index(g) - 0.4 + (j + 0.5) * width for g in sub[group]]
            rects = ax.bar(xs, sub[value], width, label=str(b))
            if annotate is not None:
                ax.bar_label(rects, [_fmt(annotate_fmt, v) for v in sub[annotate]], padding=1, fontsize=6)
        ax.set_xticks(range(len(groups)), [str(g) for g in groups])
        ax.set_ylabel(ylabel or value)
        ax.grid(axis="x", visible=False)
        if title:
            ax.set_title(title)
        if bars:
            ax.legend(ncols=min(4, len(bars)), loc="upper left", bbox_to_anchor=(0, -0.12))
        else:
            ax.text(0.5, 0.5, "no results", ha="center", va="center", transform=ax.transAxes)
    return fig


def scatter_tradeoff(
    frame: pd.DataFrame,
    x: str,
    y: str,
    label: str | None = None,
    *,
    group: str = "decoder",
    order: str | None = None,
    xerr: str | None = None,
    yerr: str | None = None,
    xlabel: str | None = None,
    ylabel: str | None = None,
    title: str | None = None,
    ax: Axes | None = None,
) -> Figure:
    """`y` against `x`, one line per `group` value (first-appearance order) joining its points in `order`
    (column, ascending; else row order), points annotated with their `label` column (e.g. `tau=0.9`);
    optional error bars from the `xerr`/`yerr` columns. Draws on `ax` if given."""
    fig, ax = new_figure(4.5, 3.5) if ax is None else (ax.figure, ax)
    with style():
        for g in dict.fromkeys(frame[group]):
            sub = frame[frame[group] == g]
            if order is not None:
                sub = sub.sort_values(order, kind="stable")
            ax.errorbar(
                sub[x],
                sub[y],
                xerr=None if xerr is None else sub[xerr],
                yerr=None if yerr is None else sub[yerr],
                marker="o",
                markersize=3,
                capsize=2,
                linewidth=1,
                label=str(g),
            )
            if label is not None:
                for xv, yv, t in zip(sub[x], sub[y], sub[label]):
                    ax.annotate(str(t), (xv, yv), textcoords="offset points", xytext=(3, 3), fontsize=6)
        ax.set_xlabel(xlabel or x)
        ax.set_ylabel(ylabel or y)
        if title:
            ax.set_title(title)
        ax.legend()
    return fig


def decoding_speed_figure(frame: pd.DataFrame, png: str | os.PathLike, pdf: str | os.PathLike) -> None:
    """Tokens/s per prompt set (prefixed by the run when there are several), a bar per decoder (with its
    parameters), tokens per forward pass printed above each bar."""
    several = frame["run"].nunique() > 1
    frame = frame.assign(group=[f"{r}\n{t}" if several else t for r, t in zip(frame["run"], frame["task"])])
    fig = grouped_bars(
        frame,
        "group",
        "label",
        "tokens_per_s",
        annotate="tokens_per_forward_pooled",
        ylabel="tokens / s",
        title="Decoding speed (number above bar: tokens per forward pass)",
    )
    save_figure(fig, png, pdf)


def make_figure(name: str, results: Sequence[str | os.PathLike], png: str, pdf: str) -> None:
    """Build figure `name` (a key of FIGURES) from result JSONs; write `png` and `pdf`."""
    if name not in FIGURES:
        raise ValueError(f"unknown figure {name!r}; known: {sorted(FIGURES)}")
    FIGURES[name](load_results(results), png, pdf)
    logging.getLogger(__name__).info("figure %s: %d result files -> %s, %s", name, len(results), png, pdf)


FIGURES: dict[str, Callable[[pd.DataFrame, str, str], None]] = {"decoding_speed": decoding_speed_figure}


def _fmt(fmt: str, v: float) -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)
