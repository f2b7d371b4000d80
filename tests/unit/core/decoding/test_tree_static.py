"""The tree core on the fast decode path (`backend: compiled`, `decoding.static`): prompt lookup (chains) and STAND
(trees, whose accepted branches are gathered in the static cache) verify their drafts with compiled forwards at
bucketed row counts and still emit greedy's tokens token for token (batch 1 and left-padded batches, a row that stops
early, a stop string, a budget of 2), with drafts accepted, and so does lookahead, whose Jacobi window rides as extra
rows; a decoder without a static path, and the guard, which prices eager forwards, refuse it. Traced with `aot_eager`,
as the greedy matrix is."""

from __future__ import annotations

import pytest

from mtp_core.decoding import StopCriteria, build_decoder
from mtp_core.decoding.catalog import check_decoder
from mtp_core.decoding.static import bucket_rows, cache_slots
from mtp_core.io import InputError
from tests.unit.core.decoding.drafting import check_lossless, check_stop_strings_lossless, repetitive_prompts


def _prompts(tok) -> list[list[int]]:
    return repetitive_prompts(tok, 3, seed=6) + [tok("----------").input_ids, tok("abab abab abab").input_ids]


def test_compiled_drafting_emits_greedys_tokens(tiny_loaded, traced):
    """Batches of 3 (left padding, holes, a grown cache, a row stopping early) on both tiny architectures, every row
    accepting what it accepts eager; lookahead's Jacobi window rides as extra rows of input embeddings."""
    prompts = _prompts(tiny_loaded.tokenizer)
    for name, params in (
        ("prompt-lookup", dict(num_draft=3)),
        ("stand", dict(bc=10, sampling="topk", branch=2)),
        ("lookahead", dict(bc=10, ngram=3)),
    ):
        compiled = [{**params, "backend": "compiled"}]
        assert check_lossless(tiny_loaded, name, compiled, 3, prompts, 3, 10, as_eager=True) > 0, name


def test_compiled_drafting_one_row_at_a_time(tiny_llama, traced):
    """Batch 1: the cache holds exactly the tokens and one chunk; a budget of 2 tokens."""
    prompts, params = _prompts(tiny_llama.tokenizer), dict(backend="compiled", num_draft=3)
    assert check_lossless(tiny_llama, "prompt-lookup", [params], 1, prompts, 3, 10) > 0
    check_lossless(tiny_llama, "prompt-lookup", [params], 1, prompts, 0, 1, new_tokens=2)


def test_compiled_stop_strings(tiny_llama, traced):
    check_stop_strings_lossless(tiny_llama, "stand", backend="compiled")


def test_the_static_cache_holds_the_tokens_and_one_chunk(tiny_llama, traced):
    tok = tiny_llama.tokenizer
    prompts = repetitive_prompts(tok, 2, seed=3)
    dec = build_decoder("prompt-lookup", tiny_llama.model, tok, backend="compiled", num_draft=5)
    out = dec.generate(prompts, 30, StopCriteria())
    assert dec.static.length == cache_slots(max(map(len, prompts)) + 30 + bucket_rows(6))
    assert {r for g in out for r in g.extra["chunk_rows"][1:]} <= {1, 4, 8}  # every forward at a bucket size


def test_what_has_no_static_path_refuses_it(tiny_llama):
    tok, model = tiny_llama.tokenizer, tiny_llama.model
    with pytest.raises(InputError, match="hf-greedy: backend 'compiled' is not available"):
        build_decoder("hf-greedy", model, tok, backend="compiled")
    with pytest.raises(InputError, match="guard .* prices eager forwards"):
        build_decoder("prompt-lookup", model, tok, backend="compiled", adaptive=True)
    with pytest.raises(InputError, match="guard .* prices eager forwards"):  # the config check, without torch
        check_decoder("pld", {"decoder": "prompt-lookup", "backend": "compiled", "adaptive": True})
