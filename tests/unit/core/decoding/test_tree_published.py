"""The vendored published trees: `mc_sim_7b_63`'s structure (the facts of the anchors, section (b)), the per-depth
expansion levels a grounded drafter walks, and Hydra's buffer extras."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from mtp_core.decoding.tree import hydra_extras, published_tree, published_trees, tree_buffers


def test_mc_sim_7b_63_structure():
    choices = published_tree("mc_sim_7b_63")
    assert len(choices) == 63 and len(set(choices)) == 63
    b = tree_buffers(choices)
    depth = b.position_ids
    assert b.num_nodes == 64 and [int((depth == d).sum()) for d in range(1, 5)] == [10, 28, 23, 2]
    assert [int(b.ranks[depth == d].max()) for d in range(1, 5)] == [9, 9, 9, 1]
    assert tuple(b.tree_indices.shape) == (64,) and tuple(b.medusa_attn_mask().shape) == (1, 1, 64, 64)
    assert tuple(b.retrieve_indices.shape) == (42, 5)
    extras = hydra_extras(b)
    assert Counter(extras["max_accepts"]) == {2: 18, 3: 22, 4: 2}
    assert extras["beam_sizes"] == [10, 10, 10, 2]
    assert extras["children_per_head"] == [[10], [10, 7, 3, 2, 1, 1, 1, 1, 1, 1], [10, 3, 2, 1, 1, 1, 1, 1, 2, 1], [2]]
    assert extras["children_to_expand_per_head"] == [[10], [8, 1, 1] + [0] * 7, [1] + [0] * 9, [0]]
    # Hydra's two structural requirements hold: contiguous child ranks, and the children with descendants are a
    # rank prefix of their siblings
    kids: dict[tuple, list[int]] = {}
    for p in choices:
        kids.setdefault(p[:-1], []).append(p[-1])
    for parent, ranks in kids.items():
        assert sorted(ranks) == list(range(len(ranks))), parent
        expanding = sorted(r for r in ranks if parent + (r,) in kids)
        assert expanding == list(range(len(expanding))), parent


def test_depth_levels_of_a_tree():
    b = tree_buffers([(0,), (1,), (0, 0), (1, 0), (1, 1), (1, 1, 0)])  # nodes 1..6 in (len, lex) order
    first, second, third = b.levels
    assert first.parents.tolist() == [0] and first.children.tolist() == [1, 2] and first.k == 2
    assert second.parents.tolist() == [1, 2] and second.children.tolist() == [3, 4, 5]
    assert second.parent_row.tolist() == [0, 1, 1] and second.ranks.tolist() == [0, 0, 1] and second.k == 2
    assert third.parents.tolist() == [5] and third.parent_row.tolist() == [0] and third.k == 1
    assert b.levels is b.levels  # computed once per tree
    for lv in b.levels:  # every child's parent sits in its level's parents
        assert torch.equal(lv.parents[lv.parent_row], b.parents[lv.children])


def test_unknown_published_tree():
    assert set(published_trees()) >= {"mc_sim_7b_63", "single"}
    assert published_tree("single") == [(0,)]
    with pytest.raises(KeyError, match="mc_sim_7b_63"):
        published_tree("vicuna_7b_stage9")
