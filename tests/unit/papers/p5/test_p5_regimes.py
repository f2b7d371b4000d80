"""Appendix A's features and statistics by hand (the step rows of a simulated rollout on the hand-made rank table,
Pearson r, AUROC, the low-acceptance classifier)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mtp_core.papers.p5.regimes import auroc, classifier_auroc, ema, pearson, step_rows
from tests.unit.papers.p5.test_p5_search import hand_table


def test_features_and_statistics_by_hand():
    assert ema(np.array([1.0, 2.0]), 0.5).tolist() == [1.0, 1.5]  # pandas ewm(adjust=False)
    assert ema(np.array([3.0, 3.0, 3.0]), 0.25, bias_correct=True) == pytest.approx([3.0, 3.0, 3.0])
    assert auroc(np.array([0.9, 0.8, 0.1]), np.array([1, 1, 0])) == 1.0
    assert auroc(np.array([0.5, 0.5]), np.array([1, 0])) == 0.5 and auroc(np.array([1.0]), np.array([1])) is None
    rows = [{"f": x, "accept_length": 2 * x} for x in (1.0, 2.0, 3.0, np.nan)]
    assert pearson(rows, "f") == (pytest.approx(1.0), 3)
    table = hand_table()
    table[0].entropy[:] = np.arange(8, dtype=np.float32)
    steps = step_rows(table, [(0,)])  # steps at states 0, 2, 3, 5 with accepts 1, 0, 1, 1
    assert [r["state"] for r in steps] == [0, 2, 3, 5] and [r["accept_length"] for r in steps] == [1, 0, 1, 1]
    assert [r["block_start_entropy"] for r in steps] == [0, 2, 3, 5]
    assert np.isnan(steps[0]["prev_accept_ema"]) and steps[1]["prev_accept_ema"] == 1.0
    assert steps[2]["prev_accept_ema"] == pytest.approx(1 - 2 / 9)  # 1, then 0 at alpha 2/9
    assert steps[3]["prev_3_accept_avg"] == pytest.approx(2 / 3) and np.isnan(steps[2]["prev_3_accept_avg"])


def test_classifier_separates_a_learnable_regime():
    rng = np.random.default_rng(0)
    rows = []
    for sample in range(20):
        ent = rng.uniform(0, 3, 30)
        for e in ent:
            r = {
                f: float(rng.normal())
                for f in (
                    "prev_accept_ema",
                    "prev_5_accept_avg",
                    "prev_3_accept_avg",
                    "prev_5_accept_min",
                    "entropy_smoothed_w4",
                    "entropy_smoothed_w16",
                    "entropy_macd",
                    "entropy_macd_hist",
                )
            }
            r.update(sample_idx=sample, block_start_entropy=float(e), accept_length=1 if e > 1.5 else 3)
            rows.append(r)
    out = classifier_auroc(rows, target_accept=1)
    assert out["auroc"] > 0.9 and out["n_samples"] == 20 and 0 < out["n_test_rows"] < out["n_rows"]


def test_every_regime_feature_against_pandas():
    """The public code computes the features with pandas (ewm, rolling); here pandas is the brute force: on a
    30-state trajectory of the tree {(0,), (0, 0)}, each feature of each step, and Pearson r by its
    formula over the rows where the feature is defined."""
    import pandas as pd

    from mtp_core.papers.p5.calibration import PromptTable
    from mtp_core.papers.p5.regimes import FEATURES, regime_summary

    rng = np.random.default_rng(1)
    paths = [(0, 0), (0, 1), (9, 9), (1, 0)]  # accept 2, 1, 0, 0 under {(0,), (0, 0)}
    ranks = np.array([paths[i] for i in rng.integers(0, 4, 29)] + [(-1, -1)], dtype=np.int16)
    ent = rng.uniform(0, 3, 30).astype(np.float32)
    table = [PromptTable("p", np.arange(30), ranks, np.zeros((30, 2), np.float32), np.zeros(30, np.float32), ent)]
    rows = step_rows(table, [(0,), (0, 0)])
    a = pd.Series([r["accept_length"] for r in rows])
    e = pd.Series(ent[[r["state"] for r in rows]].astype(float))
    assert len(rows) >= 8 and a.nunique() == 3  # accepts 0, 1 and 2 all occur
    want = {
        "prev_accept_ema": a.shift(1).ewm(span=8, adjust=False).mean(),
        "prev_5_accept_avg": a.shift(1).rolling(5).mean(),
        "prev_3_accept_avg": a.shift(1).rolling(3).mean(),
        "prev_5_accept_min": a.shift(1).rolling(5).min(),
        "block_start_entropy": e,
        "entropy_smoothed_w4": e.ewm(alpha=1 / 4, adjust=True).mean(),  # = the bias-corrected EMA, beta 3/4
        "entropy_smoothed_w16": e.ewm(alpha=1 / 16, adjust=True).mean(),
    }
    for f in FEATURES:
        got = np.array([r[f] for r in rows], dtype=float)
        np.testing.assert_allclose(got, want[f].to_numpy(), rtol=1e-6, equal_nan=True, err_msg=f)
    summary = regime_summary(rows)
    for f in FEATURES:
        x, y = want[f].to_numpy(), a.to_numpy(dtype=float)
        ok = np.isfinite(x)
        dx, dy = x[ok] - x[ok].mean(), y[ok] - y[ok].mean()
        den = math.sqrt((dx**2).sum() * (dy**2).sum())
        r = (dx * dy).sum() / den if den else None  # a constant feature (here the min of 5) has no r
        assert summary["pearson"][f] == (r if r is None else pytest.approx(r)), f
        assert summary["pearson_n"][f] == int(ok.sum()), f
    assert sum(v is not None for v in summary["pearson"].values()) >= 6
    assert summary["n_steps"] == len(rows) and summary["mean_accept"] == pytest.approx(a.mean())
