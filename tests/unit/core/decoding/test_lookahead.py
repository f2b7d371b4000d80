"""Lookahead decoding: the window layout and Jacobi update by hand, the n-gram pool by hand, window logits equal a
plain forward over each row's context, losslessness against reference greedy (batch 1 and > 1, stop criteria),
and drafts accepted on repetitive prompts."""

from __future__ import annotations

import random

import pytest
import torch
from transformers import DynamicCache

from mtp_core.decoding import StopCriteria, build_decoder, decoders
from mtp_core.decoding.lookahead import LookaheadDecoder, jacobi_step, window_parents
from mtp_core.decoding.ngram import NGramPool
from mtp_core.decoding.tree import TreeContext, chain_buffers, tree_forward
from tests.unit.core.decoding.drafting import check_lossless, check_stop_strings_lossless, repetitive_prompts


def test_window_parents_by_hand():
    # 3 levels x 4 columns: level 0 a chain on the root, level l column c under level l-1 column c
    assert window_parents(3, 4).tolist() == [-1, 0, 1, 2, 0, 1, 2, 3, 4, 5, 6, 7]
    assert window_parents(1, 3).tolist() == [-1, 0, 1]


def test_jacobi_step_by_hand():
    window = torch.tensor([[[10, 11, 12], [20, 21, 22]]])  # N = 3: 2 levels x W = 3
    out = torch.tensor([[[30, 31, 32], [40, 41, 42]]])  # argmax at every window row
    new, ngrams = jacobi_step(window, out, torch.tensor([99]))
    # n-grams along each column: level 0, level 1, the top level's output
    assert ngrams.tolist() == [[[10, 20, 40], [11, 21, 41], [12, 22, 42]]]
    # one level down and one column right; column 0 from the outputs below (the root's for level 0)
    assert new.tolist() == [[[99, 20, 21], [30, 40, 41]]]


def test_ngram_pool_by_hand():
    pool = NGramPool(capacity=2)
    pool.add_sequence([1, 2, 3, 1, 4, 5, 1, 2, 3], n=3)
    # keys: 1 -> (2,3), (4,5), then (2,3) again moves to the most recent end
    assert pool.lookup(1) == [(2, 3), (4, 5)]
    assert pool.lookup(2) == [(3, 1)] and pool.lookup(7) == []
    pool.add([1, 6, 7])  # full: the least recently added (4, 5) drops out
    assert pool.lookup(1) == [(6, 7), (2, 3)]
    with pytest.raises(ValueError):
        NGramPool(0)


def test_window_logits_equal_plain_forward(tiny_llama):
    """Each window row's logits equal a plain forward over prefix + root + its diagonal context."""
    model = tiny_llama.model
    gen = torch.Generator().manual_seed(0)
    prefix = torch.randint(3, 200, (1, 6), generator=gen)
    levels, width = 2, 3
    window = torch.randint(3, 200, (1, levels, width), generator=gen)
    root = torch.tensor([7])
    cache = DynamicCache(config=model.config)
    with torch.inference_mode():
        model(input_ids=prefix, cache=cache)
        ctx = TreeContext(cache, torch.ones(1, 6, dtype=torch.bool), root, torch.tensor([6]))
        emb = model.get_input_embeddings()(window.reshape(1, -1))
        logits, _ = tree_forward(
            model,
            ctx,
            chain_buffers(0),
            torch.empty(1, 0, dtype=torch.long),
            extra_parents=torch.where(window_parents(levels, width) < 0, 0, window_parents(levels, width) + 1),
            extra_embeds=emb,
        )
        for lev in range(levels):
            for c in range(width):
                seq = [*prefix[0].tolist(), 7, *window[0, 0, : c + 1].tolist(), *window[0, 1 : lev + 1, c].tolist()]
                ref = model(input_ids=torch.tensor([seq])).logits[0, -1]
                torch.testing.assert_close(logits[0, 1 + lev * width + c], ref, atol=1e-4, rtol=1e-4)


def test_registered_and_validated(tiny_llama):
    model, tok = tiny_llama.model, tiny_llama.tokenizer
    assert decoders()["lookahead"] is LookaheadDecoder and LookaheadDecoder.lossless
    d = build_decoder("lookahead", model, tok)
    assert (d.n, d.w, d.g, d.bc) == (4, 5, 5, 30)  # bc 30 at N = 4: 9 whole n-grams, W 5, G fills 14 rows
    d = build_decoder("lookahead", model, tok, bc=60, ngram=5)
    assert (d.w, d.g, d.bc) == (7, 8, 60)  # lade's recommended W = 7 at N = 5, G = 8 fills BC 60
    assert build_decoder("lookahead", model, tok, window=7, guess=7, ngram=5).bc == 57
    for bad, msg in [
        (dict(ngram=1), "ngram"),
        (dict(window=3), "both"),
        (dict(bc=3, ngram=4), "window"),
        (dict(window=9, guess=9, bc=10), "bc"),
    ]:
        with pytest.raises(ValueError, match=msg):
            build_decoder("lookahead", model, tok, **bad)


CONFIGS = [
    dict(bc=10, ngram=3),
    dict(window=3, guess=2, ngram=4, pool_from_prompt=False, seed=3),
    dict(ngram=2, window=2, guess=3),
    dict(bc=30, adaptive=True, min_obs=3, probe_every=4, calib_reps=1),
]


@pytest.mark.parametrize("batch", [1, 3])
def test_lossless_against_greedy(tiny_loaded, batch):
    tok = tiny_loaded.tokenizer
    prompts = repetitive_prompts(tok, 3, seed=5) + [tok("----------").input_ids, tok("abab abab abab").input_ids]

    def check(dec, g):
        assert max(g.accepted) <= dec.n and max(g.extra["drafted"]) <= dec.bc - 1

    accepted = check_lossless(tiny_loaded, "lookahead", CONFIGS, batch, prompts, stop_row=3, stop_at=10, check=check)
    assert accepted > 0


def test_stop_strings_lossless(tiny_llama):
    check_stop_strings_lossless(tiny_llama, "lookahead", bc=10, ngram=3)


def test_repetitive_prompt_accepts_drafts(tiny_llama):
    tok, model = tiny_llama.tokenizer, tiny_llama.model
    out = build_decoder("lookahead", model, tok, bc=10, ngram=3).generate(
        [tok("----------").input_ids], 32, StopCriteria()
    )
    assert out[0].tokens_per_forward > 1.5, out[0].accepted


@pytest.mark.parametrize("bc, ngram", [(10, 3), (30, 4), (60, 5)])
def test_bc_budget_is_filled(tiny_llama, bc, ngram):
    """Window and verification trie together fill the block complexity (paper 3 matches methods by it): when the
    pool offers more guesses than fit, every drafted forward runs exactly bc rows."""
    model, tok = tiny_llama.model, tiny_llama.tokenizer
    rng = random.Random(0)
    dec = build_decoder("lookahead", model, tok, bc=bc, ngram=ngram)
    many = [[tuple(rng.sample(range(3, 250), ngram - 1)) for _ in range(20)]]  # 20 distinct guesses for any root
    dec.draft_paths = lambda state: many * state.ctx.batch_size
    g = dec.generate([tok("the cat sat").input_ids], 24, StopCriteria())[0]
    rows = [r for r in g.extra["chunk_rows"] if r]
    assert rows[:4] == [bc] * 4 and max(rows) == bc, rows  # the last forwards are cut by the tokens left
