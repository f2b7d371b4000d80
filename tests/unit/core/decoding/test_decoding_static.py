"""The fast decode path (`decoding.static`): greedy on a static cache with compiled steps emits eager greedy's tokens
token for token (batch 1 and left-padded batches, EOS and stop strings, budget edges, a long cache and the
ladder of cache lengths), the session reuses its cache and graphs across batches, and decoders without a static
path refuse it.

The matrix traces the forward with `aot_eager` (the same graph, no kernels built: seconds, not minutes); one test
builds inductor's kernels, as a job does."""

from __future__ import annotations

import pytest

from mtp_core.decoding import StopCriteria, build_decoder
from mtp_core.decoding.static import bucket_rows, cache_slots
from mtp_core.io import InputError
from tests.conftest import random_prompts


def tokens(loaded, prompts, max_new, stop, **params):
    dec = build_decoder(params.pop("decoder", "greedy"), loaded.model, loaded.tokenizer, **params)
    return [g.tokens for g in dec.generate(prompts, max_new, stop)], dec


@pytest.mark.parametrize("batch", [1, 4])
def test_compiled_greedy_emits_eager_greedys_tokens(tiny_loaded, traced, batch):
    prompts = random_prompts(tiny_loaded.tokenizer, batch, seed=20 + batch)
    free, _ = tokens(tiny_loaded, prompts, 20, StopCriteria())
    eos = free[0][6]  # a token row 0 emits: that row stops early, the others go on (eager prunes it, static does not)
    tok = tiny_loaded.tokenizer
    for stop in (StopCriteria(), StopCriteria(eos_ids=(eos,)), StopCriteria(stop_strings=(tok.decode(free[-1][3:5]),))):
        for max_new in (1, 2, 20):
            eager, _ = tokens(tiny_loaded, prompts, max_new, stop)
            compiled, dec = tokens(tiny_loaded, prompts, max_new, stop, backend="compiled")
            assert compiled == eager, (stop, max_new)
            assert dec.backend == "compiled" and dec.static.cache is not None
    assert any(len(t) < 20 for t in tokens(tiny_loaded, prompts, 20, StopCriteria(eos_ids=(eos,)))[0])


def test_a_long_cache(tiny_llama, traced):
    prompts = random_prompts(tiny_llama.tokenizer, 2, seed=4)
    max_new = 266 - max(map(len, prompts))
    eager, _ = tokens(tiny_llama, prompts, max_new, StopCriteria())
    compiled, dec = tokens(tiny_llama, prompts, max_new, StopCriteria(), backend="compiled")
    assert compiled == eager and dec.static.length == 384


def test_cache_lengths():
    """The smallest of 64 · {1, 1.5} · 2^k that holds the slots."""
    ladder = [64, 96, 128, 192, 256, 384, 512, 768, 1024]
    for slots in [1, 63, 64, 65, 96, 97, 128, 129, 200, 256, 257, 385, 700, 1000, 1024]:
        assert cache_slots(slots) == min(n for n in ladder if n >= slots), slots
    assert cache_slots(1025) == 1536


def test_the_session_reuses_its_cache_and_graphs_across_batches(tiny_llama, traced):
    dec = build_decoder("greedy", tiny_llama.model, tiny_llama.tokenizer, backend="compiled")
    first, second = random_prompts(tiny_llama.tokenizer, 2, seed=7)
    dec.generate([first], 8, StopCriteria())
    session = dec.static
    cache, compiled_once, shapes = session.cache, dec.compile_s, set(session._shapes)
    again = dec.generate([second], 8, StopCriteria())[0].tokens
    assert session.cache is cache and session._shapes == shapes and dec.compile_s == compiled_once > 0
    assert again == tokens(tiny_llama, [second], 8, StopCriteria())[0][0]  # the reset cache holds nothing stale


def test_compiled_sampling_draws_what_eager_sampling_draws(tiny_llama, traced):
    (prompt,) = random_prompts(tiny_llama.tokenizer, 1, seed=9)
    params = dict(decoder="sample", temperature=0.8, seed=3)
    assert (
        tokens(tiny_llama, [prompt], 16, StopCriteria(), **params, backend="compiled")[0]
        == tokens(tiny_llama, [prompt], 16, StopCriteria(), **params)[0]
    )


def test_inductor_compiled_greedy_emits_eager_greedys_tokens(tiny_llama):
    """The kernels a job builds (inductor, fp32 on the CPU: frozen weights, C++ GEMMs): the same tokens as eager
    greedy on these prompts, batch after batch of alternating cache lengths, and from a second decoder on the same
    model (each cache gets graphs of its own: `StaticSession._pin`)."""
    short, other = random_prompts(tiny_llama.tokenizer, 2, seed=12)
    long = (other * 20)[:70]  # 82 slots with 12 new tokens: a 96-slot cache; the short prompt's takes 64
    batches = [[short], [long], [short]]
    eager = [tokens(tiny_llama, b, 12, StopCriteria())[0] for b in batches]
    dec = build_decoder("greedy", tiny_llama.model, tiny_llama.tokenizer, backend="compiled")
    first, caches = [], []
    for b in batches:
        first.append([g.tokens for g in dec.generate(b, 12, StopCriteria())])
        caches.append(dec.static.cache)
    second, again = tokens(tiny_llama, [short], 12, StopCriteria(), backend="compiled")
    assert first == eager and second == eager[0]
    assert caches[2] is caches[0] is not caches[1]  # a shape met again: its cache, so its graphs (no recompile)
    assert dec.compile_s > 0 and again.compile_s > 0


def test_decoders_without_a_static_path_refuse_it(tiny_llama):
    with pytest.raises(InputError, match=r"hf-greedy: backend 'compiled' is not available .*eager"):
        build_decoder("hf-greedy", tiny_llama.model, tiny_llama.tokenizer, backend="compiled")
    with pytest.raises(InputError, match="backend 'fast'"):
        build_decoder("greedy", tiny_llama.model, tiny_llama.tokenizer, backend="fast")
    assert build_decoder("lookahead", tiny_llama.model, tiny_llama.tokenizer).backend == "eager"


def test_row_buckets():
    assert [bucket_rows(r) for r in (1, 2, 4, 5, 63, 64, 65, 128)] == [1, 4, 4, 8, 64, 64, 128, 128]
    with pytest.raises(ValueError, match="at most 128"):
        bucket_rows(129)
