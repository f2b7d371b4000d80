"""Paper 4's reported numbers on hand-made result files, each against a value computed here by hand: every column of
the quality tables (1, 2, 4, 5) and of Table 3, every series of Figures 4 and 5 (read back from the drawn figure),
Figure 5's fit, and the leaderboard's τ choice."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mtp_core.bench.prompt_sets import row_params
from mtp_core.papers.p4 import figures
from mtp_core.papers.p4.figures import binned_curve, log_fit, scaling_figure, speedup_figure
from mtp_core.papers.p4.report import quality_table, select_tau, speed_frame, speed_table
from mtp_core.results.write import make_result, write_result


def _write(
    path: Path,
    metrics: dict[str, tuple[float | None, float | None]],
    *,
    n: int = 16,
    settings: dict | None = None,
    decode_stats: dict | None = None,
    decoder: dict | None = None,
    plts: list[float] | None = None,
) -> str:
    """A result file with `metrics` {key: (value, stderr)} (in this order) and, given `plts`, a samples file whose
    rows carry the decoder's measured PLT."""
    write_result(
        str(path),
        make_result(
            kind="eval",
            paper="p4",
            run="r",
            model="m",
            task="t",
            decoder=decoder or {"name": "dmtd", "lossless": False, "params": {}},
            n=n,
            metrics={k: {"value": v, "stderr": e} for k, (v, e) in metrics.items()},
            decode_stats=decode_stats or {},
            settings=settings or {},
            scale="tiny",
            config_hash="0" * 12,
        ),
        [{"extra": {"plt_measured": p}} for p in plts] if plts else None,
    )
    return str(path)


# ------------------------------------------------------------------------------------------ quality tables

COLUMNS = ["tf_acc", "arc", "gsm"]
METRICS = {"tf_acc": "tf_acc,none", "arc": "exact_match,last-answer", "gsm": None}  # gsm: the primary metric
TITLES = {"tf_acc": "TF acc (val)", "arc": "ARC"}  # gsm: its own name


def _row_files(tmp_path, name, tf, arc, gsm, *, tau, plt=None, offsets=(), plts=None):
    """One row's result files; each task file leads with a decoy metric the table must not read."""
    tf_metrics = {"tf_ce,none": (9.0, 0.1), "tf_acc,none": tf}
    tf_metrics |= {f"tf_acc@{j},none": (v, 0.01) for j, v in enumerate(offsets)}
    settings = {"plt": plt} if tau else {}
    return {
        "tf_acc": _write(tmp_path / f"{name}-tf.json", tf_metrics, n=64, settings=settings),
        "arc": _write(
            tmp_path / f"{name}-arc.json",
            {"exact_match,none": (0.99, 0.0), "exact_match,last-answer": arc},
            n=100,
            plts=plts,
        ),
        "gsm": _write(
            tmp_path / f"{name}-gsm.json",
            {"exact_match,strict-match": (0.98, 0.0), "exact_match,flexible-extract": gsm},
            n=50,
            plts=plts,
        ),
    }


def _layout(tmp_path):
    """Table 4's shape: a block per start model (A, B), each a Vanilla row and a trained row; B's vanilla scores
    differ from A's, so a row divided by the other block's vanilla shows."""
    van_a = _row_files(tmp_path, "van-a", (0.80, 0.02), (0.60, 0.03), (0.50, 0.05), tau=0)
    ours_a = _row_files(
        tmp_path,
        "ours-a",
        (0.72, 0.01),
        (0.54, 0.02),
        (0.40, 0.04),
        tau=3,
        plt=0.5,
        offsets=(0.9, 0.7, 0.6),
        plts=[0.5, 0.6, 0.7],
    )
    van_b = _row_files(tmp_path, "van-b", (0.70, 0.02), (0.40, 0.03), (0.20, 0.05), tau=0)
    ours_b = _row_files(
        tmp_path,
        "ours-b",
        (0.63, 0.01),
        (0.30, 0.02),
        (0.10, 0.04),
        tau=2,
        plt=0.65,
        offsets=(0.8, 0.5),
        plts=[0.64, 0.66],
    )
    row = lambda block, title, label, tau, files, van: dict(  # noqa: E731
        block=block, title=title, label=label, tau=tau, files=files, vanilla=van
    )
    return [
        row("A", "Vanilla", "a@step0", 0, van_a, van_a),
        row("A", "Ours", "run-a", 3, ours_a, van_a),
        row("B", "Vanilla", "b@step0", 0, van_b, van_b),
        row("B", "Ours", "run-b", 2, ours_b, van_b),
    ]


def _ratio_se(a, sa, b, sb):
    """a / b and its delta-method standard error, a and b independent (by hand)."""
    return a / b, a / b * math.sqrt((sa / a) ** 2 + (sb / b) ** 2)


def test_quality_table_every_column_by_hand(tmp_path):
    table = quality_table(_layout(tmp_path), COLUMNS, ["arc", "gsm"], METRICS, TITLES, offsets=3)
    d = table.data
    assert d["block"].tolist() == ["A", "A", "B", "B"] and d["row"].tolist() == ["Vanilla", "Ours", "Vanilla", "Ours"]
    assert d["label"].tolist() == ["a@step0", "run-a", "b@step0", "run-b"] and d["tau"].tolist() == [0, 3, 0, 2]
    want = {  # column: [(value, stderr, n)] by row
        "TF acc (val)": [(0.80, 0.02, 64), (0.72, 0.01, 64), (0.70, 0.02, 64), (0.63, 0.01, 64)],
        "ARC": [(0.60, 0.03, 100), (0.54, 0.02, 100), (0.40, 0.03, 100), (0.30, 0.02, 100)],
        "gsm": [(0.50, 0.05, 50), (0.40, 0.04, 50), (0.20, 0.05, 50), (0.10, 0.04, 50)],
    }
    for name, cells in want.items():
        assert list(zip(d[name], d[f"{name} ± "], d[f"{name} n"])) == pytest.approx(cells), name
    # Overall over ARC and gsm: each trained row against its own block's Vanilla row
    ra, rb = (
        [_ratio_se(0.54, 0.02, 0.60, 0.03), _ratio_se(0.40, 0.04, 0.50, 0.05)],
        [
            _ratio_se(0.30, 0.02, 0.40, 0.03),
            _ratio_se(0.10, 0.04, 0.20, 0.05),
        ],
    )
    assert d["Overall (%)"].tolist() == pytest.approx([100.0, 85.0, 100.0, 62.5])
    overall_se = [100 * math.sqrt(sum(se**2 for _, se in r)) / 2 for r in (ra, rb)]
    assert d["Overall ± "].tolist() == pytest.approx([0.0, overall_se[0], 0.0, overall_se[1]])
    assert d["PLT"].tolist() == pytest.approx([1.0, 0.5, 1.0, 0.65])
    assert d["1/PLT"].tolist() == pytest.approx([1.0, 2.0, 1.0, 1 / 0.65])
    assert d["PLT (measured)"].tolist() == pytest.approx([1.0, 0.6, 1.0, 0.65])  # mean over the samples
    offsets = d[["TF acc@0", "TF acc@1", "TF acc@2"]].to_numpy(float)
    assert np.isnan(offsets[[0, 2]]).all() and offsets[1].tolist() == [0.9, 0.7, 0.6]
    assert offsets[3, :2].tolist() == [0.8, 0.5] and np.isnan(offsets[3, 2])  # τ 2 has no offset 2
    shown = table.display().set_index("row")
    assert shown["TF acc (val)"].tolist() == ["0.800 ± 0.020", "0.720 ± 0.010", "0.700 ± 0.020", "0.630 ± 0.010"]
    assert shown["Overall (%)"].tolist()[:2] == ["100.0 ± 0.0", f"85.0 ± {overall_se[0]:.1f}"]
    # every column in Overall: the teacher-forced column joins the mean
    every = quality_table(_layout(tmp_path), COLUMNS, COLUMNS, METRICS, TITLES).data
    assert every["Overall (%)"].tolist() == pytest.approx(
        [100.0, 100 * (0.72 / 0.80 + 0.9 + 0.8) / 3, 100.0, 100 * (0.63 / 0.70 + 0.75 + 0.5) / 3]
    )
    assert "TF acc@0" not in every and "block" in every


def test_quality_table_without_blocks_or_task_columns(tmp_path):
    """Tables 1 and 5 have no blocks (the column is dropped); with the teacher-forced column alone no generation ran,
    so the measured PLT is NaN while Eq. 7's comes from the teacher-forced result."""
    layout = [{**r, "block": None} for r in _layout(tmp_path)[:2]]
    d = quality_table(layout, ["tf_acc"], ["tf_acc"], METRICS, TITLES).data
    assert "block" not in d and d["Overall (%)"].tolist() == pytest.approx([100.0, 90.0])
    assert d["PLT"].tolist() == [1.0, 0.5] and d["PLT (measured)"].iloc[0] == 1.0
    assert math.isnan(d["PLT (measured)"].iloc[1])


# -------------------------------------------------------------------------------------------------- Table 3

SPEED = {  # (batch, setting): (tau, tokens/s, measured PLT per sample)
    (1, "greedy"): (None, 10.0, None),
    (1, "dmtd-tau1"): (1, 9.0, [1.0, 1.0]),
    (1, "dmtd-tau3"): (3, 16.0, [0.5, 0.54]),
    (4, "greedy"): (None, 30.0, None),
    (4, "dmtd-tau1"): (1, 27.0, [1.0, 1.0]),
    (4, "dmtd-tau3"): (3, 39.0, [0.6, 0.6]),
}
COSTS = {1: {"1": 0.95, "3": 1.7}, 4: {"1": 0.9, "3": 1.4}}  # modeled speed-up per batch and τ
PLT3 = 0.511


def _speed_files(tmp_path):
    results, costs = {}, {}
    for (batch, setting), (tau, tps, plts) in SPEED.items():
        greedy = SPEED[batch, "greedy"][1]
        decoder = {"name": "greedy", "params": {}} if tau is None else {"name": "dmtd", "params": {"tau": tau}}
        results[batch, setting] = _write(
            tmp_path / f"b{batch}-{setting}.json",
            {},
            decoder=decoder,
            decode_stats={"tokens_per_s": tps, "speedup_vs_greedy": tps / greedy},
            settings={"threads": 2, "load_1min": 0.5},
            plts=plts,
        )
    for batch, modeled in COSTS.items():
        costs[batch] = tmp_path / f"costs-b{batch}.json"
        costs[batch].write_text(json.dumps({"modeled_speedup": modeled, "plt": {"1": 1.0, "3": PLT3}}))
    return results, costs


def test_table3_every_column_by_hand(tmp_path):
    frame = speed_frame(*_speed_files(tmp_path))
    d = speed_table(frame).data.set_index("row")
    assert d.index.tolist() == ["Vanilla", "MTD1 (twin)", "MTD3"]
    for batch in (1, 4):
        greedy = SPEED[batch, "greedy"][1]
        for row, setting in [("Vanilla", "greedy"), ("MTD1 (twin)", "dmtd-tau1"), ("MTD3", "dmtd-tau3")]:
            tau, tps, _ = SPEED[batch, setting]
            assert d.loc[row, f"Batch={batch} tok/s"] == tps
            assert d.loc[row, f"Batch={batch} ×"] == pytest.approx(tps / greedy)
            modeled = 1.0 if tau is None else COSTS[batch][str(tau)]
            assert d.loc[row, f"Batch={batch} × modeled"] == pytest.approx(modeled)
    assert d["PLT"].tolist() == pytest.approx([1.0, 1.0, PLT3]) and d["1/PLT"].tolist() == pytest.approx(
        [1.0, 1.0, 1 / PLT3]
    )
    assert d["PLT (measured)"].tolist() == pytest.approx([1.0, 1.0, 0.52])  # batch 1's samples
    assert frame.set_index(["batch", "setting"]).loc[(4, "dmtd-tau3"), "plt_measured"] == pytest.approx(0.6)


# --------------------------------------------------------------------------------------------------- Figures


@pytest.fixture
def drawn(monkeypatch):
    """The figures `figures` draws, kept when saved."""
    figs = []
    save = figures.save_figure
    monkeypatch.setattr(figures, "save_figure", lambda fig, png, pdf=None: (figs.append(fig), save(fig, png, pdf)))
    return figs


def test_figure4_series_by_hand(tmp_path, drawn):
    """Bars: the measured speed-up per τ > 1 (the twin left out) by batch size; dots: the modeled one; a dashed line
    at 1/PLT per τ and a line at 1."""
    speedup_figure(speed_frame(*_speed_files(tmp_path)), tmp_path / "f.png", tmp_path / "f.pdf")
    ax = drawn[0].axes[0]
    bars = ax.containers
    assert len(bars) == 1 and bars[0].get_label() == "MTD3"
    assert [p.get_height() for p in bars[0].patches] == pytest.approx([16.0 / 10.0, 39.0 / 30.0])
    dots = [line for line in ax.lines if line.get_marker() == "o"]
    assert [list(line.get_ydata()) for line in dots] == [pytest.approx([COSTS[1]["3"], COSTS[4]["3"]])]
    flat = sorted(line.get_ydata()[0] for line in ax.lines if line.get_marker() != "o")
    assert flat == pytest.approx(sorted([1.0, 1 / PLT3]))
    assert [t.get_text() for t in ax.get_xticklabels()] == ["Batch=1", "Batch=4"]


CURVE = pd.DataFrame(
    {
        "step": range(1, 9),
        "tokens_total": [10, 20, 40, 80, 160, 320, 640, 1280],
        "loss": [9.0, 8.0, 5.0, 4.6, 4.0, 3.8, 3.0, 2.6],
    }
)


def test_figure5_bins_fit_and_series_by_hand(tmp_path, drawn):
    """Warm-up 2 leaves steps 3-8 (tokens 40 .. 1280); 3 log-spaced bins have edges 40, 127, 403, 1280: tokens
    {40, 80}, {160, 320}, {640, 1280}. The fit: least squares of loss on log10(tokens), by hand."""
    pts = binned_curve(CURVE, warmup=2, bins=3)
    assert pts["tokens"].tolist() == pytest.approx([60.0, 240.0, 960.0])
    assert pts["loss"].tolist() == pytest.approx([4.8, 3.9, 2.8])
    x = [math.log10(t) for t in (60.0, 240.0, 960.0)]
    y = [4.8, 3.9, 2.8]
    mx, my = sum(x) / 3, sum(y) / 3
    slope = sum((a - mx) * (b - my) for a, b in zip(x, y)) / sum((a - mx) ** 2 for a in x)
    intercept = my - slope * mx
    r2 = 1 - sum((b - intercept - slope * a) ** 2 for a, b in zip(x, y)) / sum((b - my) ** 2 for b in y)
    assert log_fit(pts) == pytest.approx({"slope": slope, "intercept": intercept, "r2": r2, "points": 3})
    path = tmp_path / "curves.csv"
    CURVE.to_csv(path, index=False)
    fits = scaling_figure({"E0D8 MTD3": (str(path), 2)}, 3, tmp_path / "f.png", tmp_path / "f.pdf")
    assert fits["E0D8 MTD3"] == pytest.approx(log_fit(pts))
    points, line = drawn[0].axes[0].lines
    assert list(points.get_xdata()) == pytest.approx([60.0, 240.0, 960.0])
    assert list(points.get_ydata()) == pytest.approx(y)
    assert list(line.get_ydata()) == pytest.approx([intercept + slope * math.log10(t) for t in (60.0, 960.0)])
    assert points.get_label().startswith(f"E0D8 MTD3 (slope {slope:.3f}/decade, R²={r2:.3f})")


def test_fig5_fit_recovers_a_log_linear_curve():
    tokens = [1000 * 2**i for i in range(1, 40)]
    curve = pd.DataFrame(
        {"step": range(1, 40), "tokens_total": tokens, "loss": [3.0 - 0.2 * math.log10(t) for t in tokens]}
    )
    pts = binned_curve(curve, warmup=3, bins=6)
    assert len(pts) == 6 and pts["tokens"].min() > tokens[2]
    fit = log_fit(pts)
    assert fit["slope"] == pytest.approx(-0.2, abs=1e-3) and fit["r2"] == pytest.approx(1.0)


# --------------------------------------------------------------------------------------------- the τ choice


def test_tau_choice_reads_retention_then_speed(tmp_path):
    """Retention = teacher-forced accuracy / the vanilla model's (0.5); the fastest τ with retention >= the threshold
    (a τ exactly at it qualifies: dyadic values, so the ratios are exact); none qualifying, the τ of highest
    retention; only the τ both jobs ran."""
    van = _write(tmp_path / "van.json", {"tf_acc,none": (0.5, 0.02)})
    acc = {1: 0.495, 2: 0.4375, 3: 0.375, 4: 0.25, 5: 0.2}  # retention 0.99, 0.875, 0.75, 0.5, 0.4
    tf = {t: _write(tmp_path / f"tf{t}.json", {"tf_acc,none": (a, 0.01)}, n=8) for t, a in acc.items()}
    tps = {1: 9.0, 2: 12.0, 3: 14.0, 4: 20.0, 6: 30.0}
    speed = {t: _write(tmp_path / f"s{t}.json", {}, decode_stats={"tokens_per_s": v}) for t, v in tps.items()}
    chosen = select_tau(van, tf, speed, 0.75)
    assert chosen["params"] == {"tau": 3} and "met" in chosen["rule"]
    cands = {c["tau"]: c for c in chosen["candidates"]}
    assert sorted(cands) == [1, 2, 3, 4]
    for t, c in cands.items():
        r, se = _ratio_se(acc[t], 0.01, 0.5, 0.02)
        assert (c["retention"], c["retention_stderr"], c["tokens_per_s"], c["n"]) == pytest.approx((r, se, tps[t], 8))
    assert select_tau(van, tf, speed, 0.875)["params"] == {"tau": 2}
    none = select_tau(van, tf, speed, 0.999)
    assert none["params"] == {"tau": 1} and "none met" in none["rule"]  # the highest retention
    row = {"label": "p4-main-dmtd-selected", "params": {"decoder": "dmtd"}, "params_from": str(tmp_path / "c.json")}
    (tmp_path / "c.json").write_text(json.dumps(chosen))
    assert row_params(row) == {"decoder": "dmtd", "tau": 3}
