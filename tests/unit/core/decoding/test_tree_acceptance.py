"""The tree core's additions for paper 5: typical acceptance on fixed probabilities (hand-computed thresholds),
`allowed` nodes, the prompt's hidden states after the prefill, cached chunk layouts, drafter state objects pruned
with the rows."""

from __future__ import annotations

import math

import pytest
import torch

from mtp_core.decoding import StopCriteria, build_decoder
from mtp_core.decoding.tree import (
    Draft,
    TreeDecoder,
    TreeState,
    chain_buffers,
    greedy_accept,
    tree_buffers,
    typical_accept,
)
from mtp_core.decoding.tree.verify import _chunk_layout
from tests.conftest import random_prompts


def logits_of(*dists: list[float], vocab: int = 4) -> torch.Tensor:
    """[1, N, vocab] logits whose softmax (T = 1) is each given distribution (zero-padded to `vocab`)."""
    rows = [list(d) + [0.0] * (vocab - len(d)) for d in dists]
    return torch.log(torch.tensor(rows, dtype=torch.float64).clamp(min=1e-30))[None]


def threshold(p: list[float], eps: float = 0.09, alpha: float = 0.3) -> float:
    h = -sum(x * math.log(x + 1e-5) for x in p)
    return min(eps, alpha * math.exp(-h))


def test_typical_thresholds_by_hand():
    # the spec's hand computations: H([.5, .3, .2]) = 1.0296 -> 0.09; H([.96, .02, .02]) = 0.1956 -> 0.09;
    # uniform over 4 -> 0.0750
    assert threshold([0.5, 0.3, 0.2]) == 0.09 and -sum(
        x * math.log(x + 1e-5) for x in [0.5, 0.3, 0.2]
    ) == pytest.approx(1.0296, abs=1e-4)
    assert threshold([0.96, 0.02, 0.02]) == 0.09
    assert threshold([0.25] * 4) == pytest.approx(0.0750, abs=1e-4)

    b = tree_buffers([(0,), (1,), (2,)])  # three children of the root: tokens 0, 1, 2
    cand = torch.tensor([[0, 1, 2]])
    for dist, expect_ok in (
        ([0.5, 0.3, 0.2], [True, True, True]),
        ([0.96, 0.02, 0.02], [True, False, False]),
        ([0.25, 0.25, 0.25, 0.25], [True, True, True]),
        ([0.07, 0.08, 0.85], [False, False, True]),  # below 0.09 fails
    ):
        node_logits = logits_of(dist, [1, 0, 0, 0], [1, 0, 0, 0], [1, 0, 0, 0])
        n, last, path, tokens, ok = typical_accept(node_logits, cand, b, temperature=1.0)
        assert ok[0, 1:].tolist() == expect_ok, dist
        # deepest accepted depth (1); among its nodes the largest log-likelihood, i.e. the likeliest token (the
        # first in node order on a tie)
        best = max((i for i in range(3) if expect_ok[i]), key=lambda i: (dist[i], -i))
        assert int(n[0]) == 1 and int(last[0]) == best + 1
        assert tokens[0].tolist() == [best, 0]  # the bonus: argmax at the chosen node (its row is one-hot at 0)


def test_typical_tie_on_depth_broken_by_path_likelihood_and_allowed():
    # two depth-2 nodes, (0, 0) under a likely parent and (1, 0) under a less likely one: both accepted
    b = tree_buffers([(0,), (1,), (0, 0), (1, 0)])
    cand = torch.tensor([[0, 1, 2, 3]])
    root = [0.6, 0.4, 0.0, 0.0]
    n1 = [0.0, 0.0, 0.5, 0.5]  # at node (0,): token 2 has p .5
    n2 = [0.0, 0.0, 0.0, 1.0]  # at node (1,): token 3 has p 1.0 -> path (1, 0) = .4 * 1.0 > (0, 0) = .6 * .5
    node_logits = logits_of(root, n1, n2, [1, 0, 0, 0], [0, 1, 0, 0])
    n, last, path, tokens, ok = typical_accept(node_logits, cand, b, temperature=1.0)
    assert int(n[0]) == 2 and int(last[0]) == 4 and tokens[0].tolist() == [1, 3, 1]
    assert path[0].tolist() == [0, 2, 4]
    # the same with node 4 not allowed: the other depth-2 path
    allowed = torch.tensor([True, True, True, True, False])
    n, last, *_ = typical_accept(node_logits, cand, b, temperature=1.0, allowed=allowed)
    assert int(n[0]) == 2 and int(last[0]) == 3
    # temperature sharpens: at T = 0.1 the root's [.6, .4] becomes ~[.98, .02], so (1,) fails
    n, last, _, _, ok = typical_accept(node_logits, cand, b, temperature=0.1)
    assert not bool(ok[0, 2]) and int(last[0]) == 3


def test_greedy_allowed_nodes():
    b = tree_buffers([(0,), (0, 0), (1,)])  # nodes 1 = (0,), 2 = (1,), 3 = (0, 0)
    argmax = torch.tensor([[5, 6, 7, 8]])
    cand = torch.tensor([[5, 9, 6]])  # (0,) = 5 and (0, 0) = 6 match, (1,) = 9 does not
    assert int(greedy_accept(argmax, cand, b)[0][0]) == 2
    n, last, _, tokens = greedy_accept(argmax, cand, b, allowed=torch.tensor([True, True, True, False]))
    assert int(n[0]) == 1 and int(last[0]) == 1 and tokens[0].tolist() == [5, 6, -1]


def test_typical_decoder_is_marked_lossy(tiny_llama):
    tok, model = tiny_llama.tokenizer, tiny_llama.model
    dec = build_decoder("prompt-lookup", model, tok, acceptance="typical", temperature=0.7)
    assert not dec.lossless and dec.describe()["lossless"] is False
    assert build_decoder("prompt-lookup", model, tok).lossless
    with pytest.raises(ValueError, match="acceptance"):
        build_decoder("prompt-lookup", model, tok, acceptance="nucleus")


class PromptHiddenDecoder(TreeDecoder):
    """Records the prompt's hidden states and exercises a drafter state object pruned with the rows."""

    needs_prompt_hidden = True

    class Rows:
        def __init__(self, rows):
            self.rows = rows

        def select(self, keep):
            self.rows = self.rows[keep]

    def start(self, state: TreeState) -> None:
        self.params["seen"].append(state.prompt_hidden)
        state.data["obj"] = self.Rows(state.rows.clone())

    def propose(self, state: TreeState) -> Draft | None:
        assert torch.equal(state.data["obj"].rows, state.rows)
        return None

    def row_extra(self, n):
        return {"marker": list(range(n))}


def test_prompt_hidden_states_and_state_objects(tiny_llama):
    tok, model = tiny_llama.tokenizer, tiny_llama.model
    prompts = random_prompts(tok, 3, seed=3)
    expect = build_decoder("greedy", model, tok).generate(prompts, 10, StopCriteria())
    stop = StopCriteria(eos_ids=(expect[0].tokens[3],))  # row 0 stops early: rows are pruned mid-batch
    seen: list = []
    out = PromptHiddenDecoder(model, tok, seen=seen).generate(prompts, 10, stop)
    assert [g.extra["marker"] for g in out] == [0, 1, 2]
    (hidden,) = seen
    width = max(len(p) for p in prompts)
    assert hidden.shape[:2] == (3, width)
    for i, p in enumerate(prompts):  # left padded: the real positions equal a plain forward's
        plain = model(input_ids=torch.tensor([p]), output_hidden_states=True).hidden_states[-1][0]
        torch.testing.assert_close(hidden[i, width - len(p) :], plain, atol=1e-5, rtol=1e-4)


def test_chunk_layouts_are_cached_per_tree():
    b = tree_buffers([(0,), (1,), (0, 0)])
    first = _chunk_layout(b, None, True)
    assert _chunk_layout(b, None, True) is first and not first[3]
    extra = _chunk_layout(b, torch.tensor([3]), True)
    assert extra is not _chunk_layout(b, torch.tensor([3]), True)  # layouts with extra rows are not cached
    chain = _chunk_layout(chain_buffers(2), None, True)
    assert chain[3] and chain[2] == 1  # a 3-row chain padded to 4 stays causal
