"""Algorithm 1 and its companions on the spec's hand-made rank table (K = 2, n = 8 tokens): rollouts, the what-if
probe, the tie-breaks, the budget windows, the self value against the biased one, the Pareto rule, Kendall's tau."""

from __future__ import annotations

import numpy as np
import pytest

from mtp_core.papers.p5 import rollout
from mtp_core.papers.p5.calibration import MISS, PromptTable
from mtp_core.papers.p5.engines import OfflineEngine
from mtp_core.papers.p5.frontier import (
    States,
    budget_window,
    budget_winners,
    debias,
    frontier_nodes,
    greedy_search,
    kendall_tau,
    pareto,
    search_all,
    simulate,
    simulated_probe,
    simulated_value,
    what_if,
)
from mtp_core.papers.p5.rollout import RolloutEngine


def hand_table() -> list[PromptTable]:
    # states s = 1 .. 7 (0-based 0 .. 6) with rank paths (0,0) (0,1) (1,0) (0,0) (9,9) (0,0) (0,0); the last
    # state (root x_8) never starts a step
    ranks = np.array([(0, 0), (0, 1), (1, 0), (0, 0), (9, 9), (0, 0), (0, 0), (-1, -1)], dtype=np.int16)
    zeros = np.zeros(8, dtype=np.float32)
    return [PromptTable("hand", np.arange(8), ranks, np.zeros((8, 2), np.float32), zeros, zeros)]


def test_rollouts_by_hand():
    st = States.of(hand_table())
    r = simulate(st, [(0,)])
    assert r.steps[0].tolist() == [0, 2, 3, 5] and r.accepts[0].tolist() == [1, 0, 1, 1]  # s = 1, 3, 4, 6
    assert r.forwards() == [5]
    r = simulate(st, [(0,), (0, 0)])
    assert r.steps[0].tolist() == [0, 3, 6] and r.accepts[0].tolist() == [2, 2, 0]  # s = 1, 4, 7; cap 0 at s = 7
    assert r.mean_accept == pytest.approx(4 / 3)


def test_search_by_hand():
    st = States.of(hand_table())
    assert frontier_nodes({(0,)}, 2, 10) == [(1,), (0, 0)]
    assert frontier_nodes({(0,)}, 1, 10) == [(1,)]
    assert frontier_nodes({(0,), (1,)}, 1, 2) == []  # the root has max_children children
    own, means = what_if(st, ((0,),), [(1,), (0, 0)])
    assert own.mean_accept == pytest.approx(0.75) and means == pytest.approx([1.0, 1.25])
    rows = greedy_search(st, 2, stop_at=3)
    assert [r["added_node"] for r in rows] == [[0, 0], [1]]  # second: (1,) and (0, 1) tie at 4/3 and on rank
    assert rows[0]["mean_accept"] == pytest.approx(1.25) and rows[0]["improvement"] == pytest.approx(0.5)
    assert rows[1]["mean_accept"] == pytest.approx(4 / 3)  # sum 1; the shallower wins
    assert rows[0]["n_nodes"] == 2 and rows[0]["depth"] == 2 and rows[0]["n_steps"] == 4
    assert rows[0]["tree"] == [[0], [0, 0]]
    # the biased value of {(0,), (0, 0)} is 1.25 (probed at {(0,)}'s step starts), its own rollout 1.333
    res = search_all(hand_table(), [2], budgets=[2], tolerance=0.4, max_children=10)
    (self_row,) = [r for r in debias(res, "all", None, simulated_value(hand_table())) if r["n_nodes"] == 2]
    assert self_row["biased"] == pytest.approx(1.25) and self_row["self"] == pytest.approx(4 / 3)
    assert res["settings"]["stop_at"] == 2 and res["per_depth_history"]["2"][0]["id"] == "frontier_0000_n2_d2"


def test_budget_windows_and_winners():
    assert budget_window(2, 0.4) == (1, 2)
    assert budget_window(64, 0.4) == (38, 89)
    rows = [
        {"depth": 2, "n_nodes": 1, "mean_accept": 0.5},
        {"depth": 2, "n_nodes": 2, "mean_accept": 0.9},
        {"depth": 2, "n_nodes": 3, "mean_accept": 0.9},
        {"depth": 3, "n_nodes": 3, "mean_accept": 1.0},
    ]
    (w2,) = budget_winners(rows[:3], [2], 0.4)
    assert w2["n_nodes"] == 2 and w2["window"] == [1, 2]
    assert budget_winners(rows, [3], 0.0) == [
        {"depth": 2, "budget": 3, "window": [3, 3], **rows[2]},
        {"depth": 3, "budget": 3, "window": [3, 3], **rows[3]},
    ]


def test_pareto_and_kendall():
    rows = [{"n_nodes": n, "s": s} for n, s in [(1, 1.0), (2, 1.0), (2, 1.5), (3, 1.2), (4, 2.0)]]
    assert [(r["n_nodes"], r["s"]) for r in pareto(rows, "s")] == [(1, 1.0), (2, 1.5), (4, 2.0)]
    assert kendall_tau([1, 2, 3], [1, 2, 3]) == 1.0 and kendall_tau([1, 2, 3], [3, 2, 1]) == -1.0
    assert kendall_tau([1], [1]) is None


def tie_table() -> list[PromptTable]:
    """T = {(0,)} steps at states 0, 1, 3, 4, 5, 6 (accepts 0, 1, 0, 0, 0, 0); the candidate (1,) would accept at
    state 0, (0, 0) at state 1: a tie at 2/6, which the smaller rank sum breaks for the deeper (0, 0)."""
    ranks = np.array([(1, 5), (0, 0), (3, 3), (9, 9), (5, 5), (5, 5), (5, 5), (-1, -1)], dtype=np.int16)
    zeros = np.zeros(8, dtype=np.float32)
    return [PromptTable("tie", np.arange(8), ranks, np.zeros((8, 2), np.float32), zeros, zeros)]


def test_rank_sum_tie_break_before_depth():
    st = States.of(tie_table())
    own, means = what_if(st, ((0,),), [(1,), (0, 0)])
    assert own.steps[0].tolist() == [0, 1, 3, 4, 5, 6] and own.mean_accept == pytest.approx(1 / 6)
    assert means == pytest.approx([2 / 6, 2 / 6])
    (row,) = greedy_search(st, 2, stop_at=2)
    assert row["added_node"] == [0, 0]  # rank sum 0 < 1, although deeper than (1,)


def test_search_stops_at_budget_times_one_plus_tolerance():
    """Budget 3 with tolerance 0.4 grows trees to int(3 x 1.4) = 4 nodes (not 3, nor 5): three additions."""
    res = search_all(hand_table(), [2], budgets=[3], tolerance=0.4, max_children=10)
    rows = res["per_depth_history"]["2"]
    assert res["settings"]["stop_at"] == 4 and [r["n_nodes"] for r in rows] == [2, 3, 4]
    assert [r["id"] for r in rows] == ["frontier_0000_n2_d2", "frontier_0001_n3_d2", "frontier_0002_n4_d2"]
    assert [w["window"] for w in res["per_cell_winners"]] == [[1, 4]]  # int(3 x 0.6) .. int(3 x 1.4)
    two = search_all(hand_table(), [1, 2], budgets=[2], tolerance=0.4, max_children=10)
    assert [r["id"] for h in two["per_depth_history"].values() for r in h] == [
        "frontier_0000_n2_d1",
        "frontier_0001_n2_d2",
    ]  # numbered in order over the depth caps


def miss_table() -> list[PromptTable]:
    """Every head misses everywhere: every candidate's what-if mean ties at 0, so the tie-breaks alone grow T."""
    ranks = np.full((8, 2), MISS, dtype=np.int16)
    zeros = np.zeros(8, dtype=np.float32)
    return [PromptTable("miss", np.arange(8), ranks, np.zeros((8, 2), np.float32), zeros, zeros)]


@pytest.mark.parametrize("table", [hand_table, tie_table, miss_table])
@pytest.mark.parametrize(("depth", "kids"), [(1, 10), (2, 10), (2, 2)])
def test_both_engines_run_the_one_greedy_loop(monkeypatch, table, depth, kids):
    """Algorithm 1's loop is shared: the rollout engine's search, its union rollout replaced by the exact what-if
    probe of the same table, records the offline engine's history row for row (every tie-break, the depth and
    child caps, the stop, n_skipped), so the engines differ in their scorer only."""
    states = States.of(table(), depth)
    seen = []

    def union(loaded, heads, prompts, tree, candidates, max_new_tokens, batch_size, **decode):
        seen.append((tree, list(candidates), max_new_tokens, batch_size, decode))
        return simulated_probe(states, tree, candidates)

    monkeypatch.setattr(rollout, "union_iteration", union)
    engine = RolloutEngine(None, None, [[1, 2]], 8, kids, batch_size=3, n_skipped=2, temperature=0.7)
    rows = engine.search(depth, stop_at=6)
    assert rows == OfflineEngine(table(), kids, n_skipped=2).search(depth, stop_at=6)
    assert len(rows) == len(seen) and all(s[2:] == (8, 3, {"temperature": 0.7}) for s in seen)
