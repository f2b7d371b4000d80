"""Appendix A's features and statistics by hand, and the throughput model's pricing, hull and τ sweep on the hand-made
rank table."""

from __future__ import annotations

import numpy as np
import pytest

from mtp_core.papers.p5.frontier import States
from mtp_core.papers.p5.regimes import auroc, classifier_auroc, ema, pearson, step_rows
from mtp_core.papers.p5.throughput import StepPrices, candidate_trees, decode_seconds, hull, tau_sweep, throughput_row

from .test_p5_search import hand_table


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


def prices() -> StepPrices:
    # one-row step 1 s, 4 rows 2 s, 8 rows 3 s; drafting 0.1 s per tree, 0.05 s after the chain, chain 0.2 s
    p = StepPrices(verify_rows=[1, 4, 8], verify_seconds=[1.0, 2.0, 3.0], chain=0.2, prefill=[1.0])
    p.draft = {"s": 0.1, "b": 0.1}
    p.draft_after_chain = {"s": 0.05, "b": 0.05}
    return p


def test_pricing_by_hand():
    p = prices()
    assert p.verify(1) == 2.0  # 2 rows are padded to 4
    assert p.verify(3) == 2.0 and p.verify(7) == 3.0
    paths = {"s": ((0,),), "b": ((0,), (0, 0))}
    # two steps in s (no score), one in b after a scored step
    assert decode_seconds(p, ["s", "s", "b"], paths, [1, 0, 2], [False, False, True]) == pytest.approx(
        (2.0 + 0.1) * 2 + (2.0 + 0.2 + 0.05)
    )
    table = hand_table()
    row = throughput_row(p, States.of(table), table, "b", paths["b"])
    # {(0,), (0, 0)}: steps at s = 1, 4, 7 (3 steps of 3 rows -> 4 padded), 8 tokens, prefill 1 s
    assert row["forwards"] == 4 and row["modeled_tokens_per_s"] == pytest.approx(8 / (1 + 3 * 2.1))
    assert row["modeled_speedup_vs_greedy"] == pytest.approx((1 + 7 * 1.0) / (1 + 3 * 2.1))


def test_hull_candidates_and_tau_sweep():
    rows = [
        {"id": "a", "n_nodes": 1, "modeled_tokens_per_s": 1.0},
        {"id": "b", "n_nodes": 3, "modeled_tokens_per_s": 0.9},
        {"id": "c", "n_nodes": 4, "modeled_tokens_per_s": 2.0},
    ]
    assert [r["id"] for r in hull(rows)] == ["a", "c"]
    self_rows = [
        {"id": "pub", "biased": None, "self": 1.0, "n_nodes": 63, "depth": 4},
        {"id": "x", "biased": 1.0, "self": 1.0, "n_nodes": 2, "depth": 2},
        {"id": "y", "biased": 1.2, "self": 0.9, "n_nodes": 3, "depth": 2},
        {"id": "z", "biased": 1.5, "self": 1.5, "n_nodes": 3, "depth": 3},
    ]
    assert [r["id"] for r in candidate_trees(self_rows)] == ["pub", "x", "z"]
    table = hand_table()
    table[0].p0[:] = [0.9, 0.1, 0.1, 0.9, 0.1, 0.9, 0.9, 0.9]
    bank = {"s": ((0,),), "b": ((0,), (0, 0))}
    sweep = tau_sweep(table, prices(), bank, "s", "b", [0.5, 2.0], [1.0], "base_top1_prob")
    # tau 0.5: p0 0.9 > 0.5 at s = 1 -> B, which stays (0.9 > 0.5) at s = 4, 7: 3 scored steps of 4 padded rows,
    # 2.0 + 0.2 (chain) + 0.05 s each; tau 2: never B (no score exceeds 1), so no chain either: 4 steps in S
    # (2 rows padded to 4) of 2.0 + 0.1 s each
    assert [r["tau_on"] for r in sweep] == [0.5, 2.0]
    assert sweep[0]["modeled_tokens_per_s"] == pytest.approx(8 / (1 + 3 * 2.25))
    assert sweep[1]["modeled_tokens_per_s"] == pytest.approx(8 / (1 + 4 * 2.1))
    # a root-only S that the policy never leaves drafts nothing: priced as greedy (one row per token, no drafting)
    root = {"r": (), "b": bank["b"]}
    p = prices()
    p.draft["r"] = p.draft_after_chain["r"] = 0.1
    never = tau_sweep(table, p, root, "r", "b", [1.0], [1.0], "base_top1_prob")[0]
    assert never["modeled_speedup_vs_greedy"] == pytest.approx(1.0) and never["share"]["r"] == 1.0
    assert throughput_row(p, States.of(table), table, "r", ())["modeled_speedup_vs_greedy"] == pytest.approx(1.0)
    assert sweep[1]["share"] == {"s": 1.0, "b": 0.0} and sweep[0]["share"] == {"s": 0.0, "b": 1.0}
