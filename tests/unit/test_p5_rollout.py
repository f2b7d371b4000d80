"""The union-tree rollout engine (the paper's search at T > 0) equals the exact offline engine at temperature 0:
one search iteration's what-if means and T's own mean, the next added node, a tree's self rollout; and typical
acceptance runs through it (`allowed` keeps the trajectory on T)."""

from __future__ import annotations

import pytest

from mtp_core.decoding import StopCriteria
from mtp_core.heads import load_heads
from mtp_core.papers.p5.bank import canonical
from mtp_core.papers.p5.frontier import States, frontier_nodes, greedy_search, simulate, what_if
from mtp_core.papers.p5.rollout import rollout_search, self_rollout, union_iteration

from .p5_world import NEW_TOKENS, world
from .test_p5_simulation import table_of


class Loaded:
    """The world's model with no stop ids (the offline tables run the full budget)."""

    def __init__(self, loaded):
        self.model, self.tokenizer = loaded.model, loaded.tokenizer

    def stop_criteria(self):
        return StopCriteria()


def test_union_rollout_equals_offline_at_temperature_zero():
    w = world()
    loaded = Loaded(w.loaded)
    heads = load_heads(w.heads["hydra"], w.loaded.model).bind(w.loaded.model)
    table = table_of("hydra")
    states = States.of(table, 3)
    tree = canonical([(0,), (0, 0), (1,)])
    cands = frontier_nodes(set(tree), 3, 10)
    offline_own, offline = what_if(states, tree, cands)
    own, means, steps = union_iteration(loaded, heads, w.prompts, tree, cands, NEW_TOKENS, batch_size=2)
    assert steps == offline_own.n_steps
    assert own == pytest.approx(offline_own.mean_accept)
    assert means == pytest.approx(offline)
    assert self_rollout(loaded, heads, w.prompts, tree, NEW_TOKENS) == pytest.approx(simulate(states, tree).mean_accept)
    (row,) = rollout_search(loaded, heads, w.prompts, 2, stop_at=2, max_new_tokens=NEW_TOKENS)
    (want,) = greedy_search(States.of(table, 2), 2, stop_at=2)
    assert row["added_node"] == want["added_node"] and row["mean_accept"] == pytest.approx(want["mean_accept"])


def test_union_rollout_with_typical_acceptance_stays_on_the_tree():
    w = world()
    loaded = Loaded(w.loaded)
    heads = load_heads(w.heads["hydra"], w.loaded.model).bind(w.loaded.model)
    tree = canonical([(0,)])
    own, means, steps = union_iteration(
        loaded, heads, w.prompts[:4], tree, [(1,), (0, 0)], NEW_TOKENS, acceptance="typical", temperature=0.7
    )
    assert 0 <= own <= 1  # T = {(0,)} accepts at most one draft
    assert all(m >= own for m in means) and steps > 0
