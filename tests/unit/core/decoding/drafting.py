"""Shared checks of the lossless drafting decoders (prompt lookup, lookahead, STAND): prompts that repeat
themselves (so that n-gram drafts get accepted) and token-for-token equality with reference greedy."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from mtp_core.decoding import GenerationResult, StopCriteria, build_decoder


def repetitive_prompts(tok, n: int, seed: int) -> list[list[int]]:
    """`n` prompts made of a short phrase repeated 1-4 times plus a few random words."""
    rng = random.Random(seed)
    words = [
        "the",
        "cat",
        "sat",
        "on",
        "a",
        "mat",
        "while",
        "seven",
        "dogs",
        "ran",
        "past",
        "12",
        "+",
        "7",
        "=",
        "x",
        "y",
    ]
    out = []
    for _ in range(n):
        phrase = " ".join(rng.choices(words, k=rng.randint(1, 4)))
        text = " ".join([phrase] * rng.randint(1, 4) + rng.choices(words, k=rng.randint(0, 5)))
        out.append(tok(text).input_ids)
    return out


def check_lossless(
    loaded,
    name: str,
    configs: Sequence[dict],
    batch: int,
    prompts: list[list[int]],
    stop_row: int,
    stop_at: int,
    check: Callable[[object, GenerationResult], None] = lambda dec, g: None,
    new_tokens: int = 24,
    as_eager: bool = False,
) -> int:
    """Decode `prompts` with decoder `name` under each of `configs` (batches of `batch`) and assert the tokens
    equal reference greedy's, with greedy's token `stop_at` of row `stop_row` made an EOS so that one row stops
    early; `check(decoder, result)` runs on every result; `as_eager`: every row drafts and accepts what it does on the
    eager backend (a compiled batch keeps its finished rows: they must not draft, nor change what the others draft).
    Returns the number of draft tokens accepted."""
    tok, model = loaded.tokenizer, loaded.model
    greedy = build_decoder("greedy", model, tok)
    free = greedy.generate(prompts, new_tokens, StopCriteria())
    stop = StopCriteria(eos_ids=loaded.eos_ids + (free[stop_row].tokens[stop_at],))
    expect = [g.tokens for g in greedy.generate(prompts, new_tokens, stop)]
    accepted = 0
    for params in configs:
        dec = build_decoder(name, model, tok, **params)
        out = dec.generate_all(prompts, new_tokens, stop, batch_size=batch)
        assert [g.tokens for g in out] == expect, params
        if as_eager:
            eager = build_decoder(name, model, tok, **{**params, "backend": "eager"})
            ref = eager.generate_all(prompts, new_tokens, stop, batch)
            assert [(g.accepted, g.extra["drafted"]) for g in out] == [(g.accepted, g.extra["drafted"]) for g in ref]
        for g in out:
            assert g.accepted[0] == 1 and sum(g.accepted) >= len(g.tokens)
            check(dec, g)
        accepted += sum(a - 1 for g in out for a in g.accepted[1:])
    return accepted


def check_stop_strings_lossless(loaded, name: str, **params) -> None:
    """A stop string (two tokens of greedy's first output) ends decoder `name` exactly where it ends greedy."""
    tok, model = loaded.tokenizer, loaded.model
    prompts = [tok("----------").input_ids, *repetitive_prompts(tok, 2, seed=4)]
    free = build_decoder("greedy", model, tok).generate(prompts, 24, StopCriteria())
    stop = StopCriteria(stop_strings=(tok.decode(free[0].tokens[6:8]),))
    expect = build_decoder("greedy", model, tok).generate(prompts, 24, stop)
    out = build_decoder(name, model, tok, **params).generate(prompts, 24, stop)
    assert [g.tokens for g in out] == [g.tokens for g in expect]
    assert [g.stop_reason for g in out] == [g.stop_reason for g in expect]
