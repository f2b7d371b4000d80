"""The scheduler on hand-made score traces: hysteresis (on needs >, off needs <=), the policy period, the threshold
ladder, path values and the degenerate `best_path_value`."""

from __future__ import annotations

import numpy as np
import pytest

from mtp_core.papers.p5.scheduler import Policy, feature_depth, ladder_thresholds, path_values, reduce_batch, score

SCORES = [0.1, 0.6, 0.45, 0.35, 0.2, 0.55, 0.5]


def run(policy: Policy, scores) -> str:
    policy.reset()
    return " ".join(policy.choose(s) for s in scores)


def test_binary_tau_hysteresis_by_hand():
    p = Policy("binary_tau", ["S", "B"], conservative="S", aggressive="B", tau_on=0.5, tau_off=0.3)
    assert run(p, SCORES) == "S B B B S B B"
    single = Policy("binary_tau", ["S", "B"], conservative="S", aggressive="B", tau_on=0.5, tau_off=0.5)
    assert run(single, SCORES) == "S B S S S B S"  # 0.5 leaves B (off needs <=)
    assert run(single, [0.5, 0.5, 0.6, 0.5]) == "S S B S"  # 0.5 keeps S (on needs >)
    every2 = Policy("binary_tau", ["S", "B"], conservative="S", aggressive="B", tau_on=0.3, tau_off=0.3, period=2)
    assert run(every2, SCORES) == "S S B B S S B"  # evaluated at steps 0, 2, 4, 6 only
    with pytest.raises(ValueError, match="tau_off"):
        Policy("binary_tau", ["S", "B"], conservative="S", aggressive="B", tau_on=0.3, tau_off=0.5)
    # scores are probabilities: τ_on >= 1 never leaves S, and then reads no score
    never = Policy("binary_tau", ["S", "B"], conservative="S", aggressive="B", tau_on=1.0, tau_off=0.5)
    assert never.reachable == ["S"] and not never.needs_score and run(never, [None, None]) == "S S"
    assert p.reachable == ["S", "B"] and p.needs_score
    same = Policy("binary_tau", ["S"], conservative="S", aggressive="S", tau_on=0.5, tau_off=0.5)
    assert same.reachable == ["S"] and not same.needs_score  # S = B (a one-tree hull): nothing to choose


def test_ladder_and_static():
    assert ladder_thresholds(3) == pytest.approx([1 / 3, 2 / 3])
    ladder = Policy("threshold_ladder", ["a", "b", "c"])
    assert run(ladder, [0.2, 0.5, 2 / 3, 0.9]) == "a b c c"
    assert run(Policy("static", ["a", "b"], static="b"), [None, None]) == "b b"
    assert ladder.reachable == ["a", "b", "c"] and Policy("static", ["a", "b"], static="b").reachable == ["b"]
    with pytest.raises(ValueError, match="not in the bank"):
        Policy("static", ["a"], static="z")


def test_path_values_and_features():
    g = path_values(0.9, np.array([0.8, 0.5, 0.5, 0.2]))
    assert g == pytest.approx([0.72, 0.36, 0.18, 0.036])
    chain = np.array([0.8, 0.5, 0.5, 0.2])
    assert score("path_value_greedy_depth4", 0.9, chain) == pytest.approx(0.036)
    assert score("base_top1_prob", 0.9, None) == pytest.approx(0.9)
    assert score("best_path_value", 0.9, chain) == pytest.approx(0.9)  # degenerate: always p0
    assert feature_depth("path_value_greedy_depth2") == 2 and feature_depth("base_top1_prob") == 0
    with pytest.raises(ValueError, match="score feature"):
        feature_depth("entropy")
    assert reduce_batch(np.array([0.2, 0.4]), "mean") == pytest.approx(0.3)
    assert reduce_batch(np.array([0.2, 0.4]), "min") == pytest.approx(0.2)
