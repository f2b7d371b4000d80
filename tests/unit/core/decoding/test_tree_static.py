"""The tree core on the fast decode path (`backend: compiled`, `decoding.static`): prompt lookup (chains) and STAND
(trees, whose accepted branches are gathered in the static cache) verify their drafts with compiled forwards at
bucketed row counts and still emit greedy's tokens token for token (batch 1 and left-padded batches, a row that stops
early, a stop string, a budget of 2), with drafts accepted; decoders whose forwards carry extra rows or whose guard
prices eager forwards refuse it. Traced with `aot_eager`, as the greedy matrix is."""

from __future__ import annotations

import pytest

from mtp_core.decoding import StopCriteria, build_decoder, static
from mtp_core.decoding.static import bucket_rows, cache_slots
from mtp_core.io import InputError
from tests.unit.core.decoding.drafting import check_lossless, check_stop_strings_lossless, repetitive_prompts


@pytest.fixture
def traced(monkeypatch):
    monkeypatch.setattr(static, "COMPILE_BACKEND", "aot_eager")


@pytest.mark.parametrize("batch", [1, 3])
def test_compiled_drafting_emits_greedys_tokens(tiny_loaded, traced, batch):
    tok = tiny_loaded.tokenizer
    prompts = repetitive_prompts(tok, 3, seed=6) + [tok("----------").input_ids, tok("abab abab abab").input_ids]
    chains = [dict(backend="compiled", num_draft=3), dict(backend="compiled", num_draft=1)]
    trees = [dict(backend="compiled"), dict(backend="compiled", bc=10, sampling="topk", branch=2)]
    accepted = check_lossless(tiny_loaded, "prompt-lookup", chains, batch, prompts, stop_row=3, stop_at=10)
    assert check_lossless(tiny_loaded, "stand", trees, batch, prompts, stop_row=3, stop_at=10) > 0 < accepted
    check_lossless(tiny_loaded, "prompt-lookup", chains[:1], batch, prompts, stop_row=0, stop_at=1, new_tokens=2)


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
    with pytest.raises(InputError, match="lookahead: backend 'compiled' is not available"):
        build_decoder("lookahead", model, tok, backend="compiled")
    with pytest.raises(ValueError, match="guard .* prices eager forwards"):
        build_decoder("prompt-lookup", model, tok, backend="compiled", adaptive=True)
