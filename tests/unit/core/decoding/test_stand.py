"""STAND: the logit-based n-gram memory (merge weights, top-k cut, back-off, one-hot prompt text) and the
best-first draft tree by hand, the memory fed from the model's own distributions, losslessness against
reference greedy (batch 1 and > 1, Gumbel and top-k drafting, stop criteria), and accepted drafts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mtp_core.decoding import StopCriteria, build_decoder, decoders
from mtp_core.decoding.ngram import NGramMemory, best_first_paths, nodes_by_depth, row_trie, union_tree
from mtp_core.decoding.stand import StandDecoder
from tests.unit.core.decoding.drafting import check_lossless, check_stop_strings_lossless, repetitive_prompts


def entry(mem: NGramMemory, key: tuple[int, ...]) -> tuple[list[int], list[float], int]:
    ids, p, k = mem.table[key]
    return list(ids), list(p), k


def test_memory_merge_by_hand():
    mem = NGramMemory(order=3, topk=2)
    mem.update([8, 5], [1, 2], [0.6, 0.4])
    assert entry(mem, (5,))[2] == 1 and entry(mem, (8, 5)) == ([1, 2], pytest.approx([0.6, 0.4]), 1)
    mem.update([9, 5], [2, 3], [0.5, 0.5])
    # context (5,): k = 1 -> 1/2 old + 1/2 new: 1: 0.3, 2: 0.2 + 0.25, 3: 0.25; top-2 kept
    ids, p, k = entry(mem, (5,))
    assert ids == [2, 1] and p == pytest.approx([0.45, 0.3]) and k == 2
    assert entry(mem, (9, 5)) == ([2, 3], pytest.approx([0.5, 0.5]), 1)
    mem.update([7, 5], [3], [1.0])  # k = 2: 2/3 old + 1/3 new; 3 (1/3) beats 1 (0.2)
    ids, p, k = entry(mem, (5,))
    assert ids == [3, 2] and p == pytest.approx([1 / 3, 0.3]) and k == 3


def test_memory_backoff_and_prompt_text():
    mem = NGramMemory(order=4)
    mem.add_sequence([1, 2, 3, 1, 2, 4])
    # 3-token context (3, 1, 2) -> 4; 1-token context (2,) saw 3 then 4: k=1 then merged 1/2 each
    assert mem.lookup([3, 1, 2]) == ((4,), (1.0,))
    ids, p = mem.lookup([9, 9, 2])  # (9, 9, 2) and (9, 2) unknown: back off to (2,)
    assert sorted(zip(ids, p)) == [(3, 0.5), (4, 0.5)]
    assert mem.lookup([9]) is None
    with pytest.raises(ValueError):
        NGramMemory(order=1)


def test_prompt_text_equals_one_by_one_updates():
    seq = torch.randint(0, 6, (60,), generator=torch.Generator().manual_seed(0)).tolist()
    batched, single = NGramMemory(order=4), NGramMemory(order=4)
    batched.add_sequence(seq)
    for i in range(1, len(seq)):
        single.update(seq[max(0, i - 3) : i], [seq[i]], [1.0])
    assert batched.table.keys() == single.table.keys()
    for key, (ids, p, k) in single.table.items():
        b_ids, b_p, b_k = batched.table[key]
        assert b_k == k and sorted(b_ids) == sorted(ids)
        assert dict(zip(b_ids, b_p)) == pytest.approx(dict(zip(ids, p)))


def test_best_first_tree_by_hand():
    mem = NGramMemory(order=2)
    mem.update([0], [1, 2], [0.7, 0.3])
    mem.update([1], [3, 4], [0.9, 0.1])
    mem.update([3], [5], [1.0])
    # values: (1) .7, (1,3) .63, (1,3,5) .63, (2) .3, (1,4) .07; ties keep push order
    assert best_first_paths(mem, [0], budget=4, branch=2, max_depth=8) == [(1,), (1, 3), (1, 3, 5), (2,)]
    assert best_first_paths(mem, [0], budget=9, branch=1, max_depth=2) == [(1,), (1, 3)]
    assert best_first_paths(mem, [7], budget=4, branch=2, max_depth=8) == []
    # Gumbel-top-k draws distinct children from the stored candidates
    paths = best_first_paths(mem, [0], 3, 2, 1, np.random.default_rng(0))
    assert sorted(paths) == [(1,), (2,)]


def test_union_tree_by_hand():
    rows = [[(1, 2, 3), (1, 4), (6,)], [(7, 8)]]
    assert row_trie(rows[0]) == {(0,): 1, (0, 0): 2, (0, 0, 0): 3, (0, 1): 4, (1,): 6}
    buffers, cand = union_tree(rows)
    assert buffers.paths == ((0,), (1,), (0, 0), (0, 1), (0, 0, 0))
    assert cand.tolist() == [[1, 6, 2, 4, 3], [7, -1, 8, -1, -1]]
    assert nodes_by_depth(buffers) == [0, 2, 4, 5]
    # a budget keeps nodes by their earliest listing in any row: (0,) (0,0) (0,0,0) (0,1) ... -> a tree
    buffers, cand = union_tree(rows, max_nodes=3)
    assert buffers.paths == ((0,), (0, 0), (0, 0, 0)) and cand.tolist() == [[1, 2, 3], [7, 8, -1]]


def test_memory_follows_model_distributions(tiny_llama):
    """A context seen once holds exactly the model's own top-10 next-token distribution at that position."""
    model, tok = tiny_llama.model, tiny_llama.tokenizer
    prompt = tok("the cat sat").input_ids
    dec = build_decoder("stand", model, tok, order=2)
    seen = {}
    orig = dec.draft_paths

    def spy(state):
        seen["mem"], seen["hist"] = state.data["memory"][0], list(state.history[0])
        return orig(state)

    dec.draft_paths = spy
    dec.generate([prompt], 8, StopCriteria())
    h, mem = seen["hist"], seen["mem"]
    with torch.inference_mode():
        probs = model(input_ids=torch.tensor([h])).logits[0].softmax(-1)
    checked = 0
    for i in range(len(prompt) - 1, len(h) - 1):  # positions whose distribution a step computed
        if h[: i + 1].count(h[i]) == 1:
            ids, p, k = mem.table[(h[i],)]
            top = probs[i].topk(10)
            assert k == 1 and list(ids) == top.indices.tolist()
            assert list(p) == pytest.approx(top.values.tolist(), abs=1e-5)
            checked += 1
    assert checked >= 2


def test_registered_and_validated(tiny_llama):
    model, tok = tiny_llama.model, tiny_llama.tokenizer
    assert decoders()["stand"] is StandDecoder and StandDecoder.lossless
    d = build_decoder("stand", model, tok)
    assert (d.bc, d.branch, d.max_depth, d.order, d.memory_topk, d.sampling) == (30, 4, 8, 4, 10, "gumbel")
    for bad, msg in [
        (dict(bc=1), "bc"),
        (dict(order=1), "order"),
        (dict(branch=0), "branch"),
        (dict(sampling="beam"), "sampling"),
    ]:
        with pytest.raises(ValueError, match=msg):
            build_decoder("stand", model, tok, **bad)


CONFIGS = [
    dict(),
    dict(bc=10, sampling="topk"),
    dict(bc=60, branch=2, max_depth=4, order=3, seed=2),
    dict(bc=30, adaptive=True, min_obs=3, probe_every=4, calib_reps=1),
]


@pytest.mark.parametrize("batch", [1, 3])
def test_lossless_against_greedy(tiny_loaded, batch):
    tok = tiny_loaded.tokenizer
    prompts = repetitive_prompts(tok, 3, seed=6) + [tok("----------").input_ids, tok("abab abab abab").input_ids]

    def check(dec, g):
        assert max(g.extra["drafted"]) <= dec.bc - 1 and max(g.accepted) <= dec.max_depth + 1

    accepted = check_lossless(tiny_loaded, "stand", CONFIGS, batch, prompts, stop_row=3, stop_at=10, check=check)
    assert accepted > 0


def test_stop_strings_lossless(tiny_llama):
    check_stop_strings_lossless(tiny_llama, "stand")


def test_repetitive_prompt_accepts_drafts(tiny_llama):
    tok, model = tiny_llama.tokenizer, tiny_llama.model
    out = build_decoder("stand", model, tok).generate([tok("----------").input_ids], 32, StopCriteria())
    assert out[0].tokens_per_forward > 1.5, out[0].accepted
    assert torch.tensor(out[0].accepted).max() > 2


def test_a_rows_draws_do_not_depend_on_its_batch(tiny_llama):
    """Gumbel drafting with a generator per row: a prompt decoded alone and in a batch with others drafts and
    accepts the same (the accepted counts per forward are equal)."""
    model, tok = tiny_llama.model, tiny_llama.tokenizer
    prompts = [tok(t).input_ids for t in ("a b a b a b a b c", "x y z x y z x y", "one two one two one")]
    dec = build_decoder("stand", model, tok, bc=10, sampling="gumbel", seed=3)
    batched = dec.generate(prompts, 16, StopCriteria())
    for p, g in zip(prompts, batched):
        alone = dec.generate([p], 16, StopCriteria())[0]
        assert alone.tokens == g.tokens and alone.accepted == g.accepted
