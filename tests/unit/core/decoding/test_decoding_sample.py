"""The sampling reference decoder (paper 5's vanilla at T 0.7): each token drawn from softmax(logits / T) of a plain
forward over the sequence so far (brute force, no cache, one seeded generator), reproducible by its seed, lossy,
greedy in the limit of a tiny temperature, and batched rows pruned as they stop."""

from __future__ import annotations

import pytest
import torch

from mtp_core.decoding import StopCriteria, build_decoder, decoders
from tests.conftest import random_prompts


def brute_force(model, prompt: list[int], n: int, temperature: float, seed: int) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    seq = list(prompt)
    with torch.inference_mode():
        for _ in range(n):
            logits = model(input_ids=torch.tensor([seq])).logits[0, -1].float()
            seq.append(int(torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=gen)))
    return seq[len(prompt) :]


def test_sampling_draws_from_the_tempered_distribution(tiny_llama):
    m, tok = tiny_llama.model, tiny_llama.tokenizer
    (prompt,) = random_prompts(tok, 1, seed=3)
    dec = build_decoder("sample", m, tok, temperature=0.7, seed=5)
    assert not dec.lossless and decoders()["sample"] is type(dec)
    (g,) = dec.generate([prompt], 16, StopCriteria())
    assert g.tokens == brute_force(m, prompt, 16, 0.7, 5) and g.accepted == [1] * 16
    assert dec.generate([prompt], 16, StopCriteria())[0].tokens == g.tokens  # re-seeded per batch
    other = build_decoder("sample", m, tok, temperature=0.7, seed=6).generate([prompt], 16, StopCriteria())[0]
    assert other.tokens != g.tokens
    cold = build_decoder("sample", m, tok, temperature=1e-4).generate([prompt], 16, StopCriteria())[0]
    assert cold.tokens == build_decoder("greedy", m, tok).generate([prompt], 16, StopCriteria())[0].tokens
    with pytest.raises(ValueError, match="temperature must be > 0"):
        build_decoder("sample", m, tok, temperature=0.0)


def test_sampling_in_a_batch_stops_rows_on_their_own(tiny_llama):
    m, tok = tiny_llama.model, tiny_llama.tokenizer
    prompts = random_prompts(tok, 3, seed=4)
    dec = build_decoder("sample", m, tok, temperature=1.0, seed=0)
    free = dec.generate(prompts, 12, StopCriteria())
    eos = free[1].tokens[3]
    out = dec.generate(prompts, 12, StopCriteria(eos_ids=(eos,)))
    first = min(free[1].tokens.index(eos), *(g.tokens.index(eos) for g in free if eos in g.tokens))
    for g, f in zip(out, free):  # every row draws as in the free run until the first row stops (pruned)
        assert g.tokens[: first + 1] == f.tokens[: first + 1]
        if eos in g.tokens:
            assert g.tokens.index(eos) == len(g.tokens) - 1 and g.stop_reason == "eos"
        else:
            assert len(g.tokens) == 12 and g.stop_reason == "length"
