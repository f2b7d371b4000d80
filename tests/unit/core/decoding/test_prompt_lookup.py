"""Prompt lookup decoding: the n-gram lookup by hand, losslessness against reference greedy and against
transformers' own prompt-lookup `generate`, batches, and acceptance on a repetitive prompt."""

from __future__ import annotations

import pytest
import torch

from mtp_core.decoding import StopCriteria, build_decoder, decoders
from mtp_core.decoding.prompt_lookup import PromptLookupDecoder, prompt_lookup_draft
from tests.unit.core.decoding.drafting import check_lossless, check_stop_strings_lossless, repetitive_prompts


def draft(seq, **kw) -> list[int]:
    return prompt_lookup_draft(torch.tensor(seq), **kw).tolist()


def test_lookup_rules():
    # longest n-gram first: the 3-gram (1,2,3) occurs once, followed by 9 9 9; the 1-gram 3 more recently by 7
    assert draft([1, 2, 3, 9, 9, 9, 5, 3, 7, 1, 2, 3], max_ngram=3, num_draft=3) == [9, 9, 9]
    assert draft([1, 2, 3, 9, 9, 9, 5, 3, 7, 1, 2, 3], max_ngram=1, num_draft=2) == [7, 1]
    # most recent match with a full continuation
    assert draft([4, 1, 5, 6, 4, 1, 7, 8, 0, 4, 1], max_ngram=2, num_draft=2) == [7, 8]
    # a self-overlapping run: the most recent match has a short continuation, an older one a full one
    assert draft([0, 0, 0, 0, 0], max_ngram=3, num_draft=2) == [0, 0]
    assert draft([0, 0, 0], max_ngram=3, num_draft=3) == [0]
    # no match (or below min_ngram), too short, num_draft 0
    assert draft([1, 2, 3, 4], max_ngram=3) == []
    assert draft([5, 6, 1, 5, 7, 2, 5], max_ngram=2, min_ngram=2) == []
    assert draft([5, 6, 1, 5, 7, 2, 5], max_ngram=2, min_ngram=1, num_draft=1) == [7]
    assert draft([5], max_ngram=3) == [] and draft([5, 5], num_draft=0) == []


def test_registered_and_validated(tiny_llama):
    assert decoders()["prompt-lookup"] is PromptLookupDecoder and PromptLookupDecoder.lossless
    d = build_decoder("prompt-lookup", tiny_llama.model, tiny_llama.tokenizer, num_draft=5)
    assert d.describe()["params"] == {"num_draft": 5} and (d.max_ngram, d.min_ngram, d.num_draft) == (3, 1, 5)
    with pytest.raises(ValueError, match="min_ngram"):
        build_decoder("prompt-lookup", tiny_llama.model, tiny_llama.tokenizer, min_ngram=4)


@pytest.mark.parametrize("batch", [1, 4])
def test_lossless_against_greedy(tiny_loaded, batch):
    tok = tiny_loaded.tokenizer
    prompts = repetitive_prompts(tok, 4, seed=1) + [tok("----------").input_ids]

    def check(dec, g):
        assert max(g.accepted) <= dec.num_draft + 1 and max(g.extra["drafted"]) <= dec.num_draft
        assert g.stop_reason in ("eos", "length")

    configs = [dict(num_draft=1), dict(num_draft=3)]
    check_lossless(tiny_loaded, "prompt-lookup", configs, batch, prompts, stop_row=1, stop_at=12, check=check)


def test_stop_strings_lossless(tiny_llama):
    check_stop_strings_lossless(tiny_llama, "prompt-lookup")


def test_matches_transformers_prompt_lookup(tiny_loaded):
    """Ours, transformers' `generate(prompt_lookup_num_tokens=3)` and reference greedy agree (batch 1)."""
    tok, model = tiny_loaded.tokenizer, tiny_loaded.model
    stop = tiny_loaded.stop_criteria()
    for prompt in repetitive_prompts(tok, 3, seed=2) + [tok("----------").input_ids]:
        hf = model.generate(
            torch.tensor([prompt]),
            attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            do_sample=False,
            max_new_tokens=20,
            prompt_lookup_num_tokens=3,
            max_matching_ngram_size=3,
            eos_token_id=list(stop.eos_ids),
            pad_token_id=tok.pad_token_id,
            temperature=None,
            top_p=None,
            top_k=None,
        )[0, len(prompt) :].tolist()
        ours = build_decoder("prompt-lookup", model, tok).generate([prompt], 20, stop)[0].tokens
        greedy = build_decoder("greedy", model, tok).generate([prompt], 20, stop)[0].tokens
        assert ours == greedy == hf[: len(greedy)]


def test_repetitive_prompt_accepts_drafts(tiny_loaded):
    """On a repetitive prompt the tiny models fall into a loop that prompt lookup drafts correctly."""
    tok, model = tiny_loaded.tokenizer, tiny_loaded.model
    prompts = [tok("----------").input_ids, tok("aaaa aaaa aaaa aaaa").input_ids]
    for batch in (1, 2):
        dec = build_decoder("prompt-lookup", model, tok)
        out = dec.generate_all(prompts, 32, StopCriteria(), batch_size=batch)
        best = max(g.tokens_per_forward for g in out)
        assert best > 1.5, [g.accepted for g in out]
        assert [g.tokens for g in out] == [
            g.tokens for g in build_decoder("greedy", model, tok).generate(prompts, 32, StopCriteria())
        ]
