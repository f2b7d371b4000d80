"""Paper 4's figures. **Figure 4** (`speedup_figure`): measured speed-up over vanilla by batch size (the frame of
`report.speed_frame`), a bar per τ, the modeled speed-up as markers and 1/PLT as dashed lines. **Figure 5**
(`scaling_figure`): training CE against training tokens (log x) per run, binned in log-spaced bins after warm-up,
with the fit loss = a + b·log10(tokens) (slope per decade, R²). Apart from the tables so that a table job loads no
matplotlib."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from ...results.figures import new_figure, save_figure, style


def speedup_figure(frame: pd.DataFrame, png: str, pdf: str) -> None:
    """Figure 4: speed-up over vanilla by batch size, a bar per τ (modeled as markers, 1/PLT dashed)."""
    dm = frame[frame["tau"].notna() & (frame["tau"] > 1)]
    fig, ax = new_figure(5.0, 3.2)
    batches = sorted(dm["batch"].unique())
    taus = sorted(dm["tau"].unique())
    width = 0.8 / max(1, len(taus))
    with style():
        for j, tau in enumerate(taus):
            sub = dm[dm["tau"] == tau].set_index("batch").reindex(batches)
            xs = np.arange(len(batches)) - 0.4 + (j + 0.5) * width
            bars = ax.bar(xs, sub["speedup"], width, label=f"MTD{int(tau)}")
            colour = bars.patches[0].get_facecolor() if bars.patches else None
            ax.plot(xs, sub["modeled"], "o", color="black", markersize=3, label="modeled" if j == 0 else None)
            ax.axhline(1 / sub["plt"].iloc[0], linestyle="--", linewidth=0.8, color=colour)
        ax.axhline(1.0, color="gray", linewidth=0.8)
        ax.set_xticks(range(len(batches)), [f"Batch={b}" for b in batches])
        ax.set_ylabel("speed-up over vanilla")
        ax.set_title("Speedup comparison (bars: measured; dots: modeled from layer costs; dashed: 1/PLT)")
        ax.grid(axis="x", visible=False)
        ax.legend(ncols=4, loc="upper left", bbox_to_anchor=(0, -0.12))
    save_figure(fig, png, pdf)


def binned_curve(curve: pd.DataFrame, warmup: int, bins: int) -> pd.DataFrame:
    """Loss against training tokens after warm-up, averaged in `bins` log-spaced token bins."""
    c = curve[(curve["step"] > warmup) & (curve["tokens_total"] > 0)]
    if c.empty:
        return pd.DataFrame(columns=["tokens", "loss"])
    edges = np.logspace(np.log10(c["tokens_total"].min()), np.log10(c["tokens_total"].max()), bins + 1)
    idx = np.clip(np.searchsorted(edges, c["tokens_total"], side="right") - 1, 0, bins - 1)
    g = c.assign(bin=idx).groupby("bin")
    return pd.DataFrame({"tokens": g["tokens_total"].mean(), "loss": g["loss"].mean()}).reset_index(drop=True)


def log_fit(points: pd.DataFrame) -> dict[str, float | int | None]:
    """loss = a + b·log10(tokens): slope b per decade, intercept a, R², points."""
    n = len(points)
    if n < 2:
        return {"slope": None, "intercept": None, "r2": None, "points": n}
    x, y = np.log10(points["tokens"].to_numpy(float)), points["loss"].to_numpy(float)
    b, a = np.polyfit(x, y, 1)
    ss = float(((y - y.mean()) ** 2).sum())
    r2 = 1 - float(((y - (a + b * x)) ** 2).sum()) / ss if ss > 0 else None
    return {"slope": float(b), "intercept": float(a), "r2": r2, "points": n}


def scaling_figure(curves: Mapping[str, tuple[str, int]], bins: int, png: str, pdf: str) -> dict[str, Any]:
    """Figure 5 from `curves` = {title: (curves.csv, warm-up steps)}; returns the fit of every curve."""
    fig, ax = new_figure(4.5, 3.2)
    fits = {}
    with style():
        for title, (path, warmup) in curves.items():
            pts = binned_curve(pd.read_csv(path), warmup, bins)
            fit = log_fit(pts)
            fits[title] = fit
            line = ax.plot(
                pts["tokens"],
                pts["loss"],
                "o-",
                markersize=3,
                linewidth=1,
                label=title
                if fit["slope"] is None
                else f"{title} (slope {fit['slope']:.3f}/decade, R²={fit['r2']:.3f})",
            )
            if fit["slope"] is not None:
                xs = np.array([pts["tokens"].min(), pts["tokens"].max()])
                ax.plot(
                    xs, fit["intercept"] + fit["slope"] * np.log10(xs), "--", linewidth=0.8, color=line[0].get_color()
                )
        ax.set_xscale("log")
        ax.set_xlabel("training tokens")
        ax.set_ylabel("cross-entropy loss (DMTD, training)")
        ax.set_title("Scaling with training data")
        ax.legend()
    save_figure(fig, png, pdf)
    return fits
