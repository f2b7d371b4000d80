"""The decoding core: reference greedy equals transformers' generate token for token (batched, left padded,
EOS and stop strings), stop tracking, cache cropping."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from mtp_core.decoding import StopCriteria, build_decoder, decoders
from mtp_core.decoding.batch import left_pad, positions_from_mask
from mtp_core.decoding.cache import crop_cache
from mtp_core.decoding.stopping import StopTracker
from tests.conftest import random_prompts


def hf_reference(loaded, prompts, max_new, stop):
    """Plain `generate(do_sample=False)` on one batch, trimmed at each row's first stop."""
    return [
        g.tokens for g in build_decoder("hf-greedy", loaded.model, loaded.tokenizer).generate(prompts, max_new, stop)
    ]


def test_registry_has_reference_decoders():
    assert {"greedy", "hf-greedy"} <= set(decoders())
    assert decoders()["greedy"].lossless


@pytest.mark.parametrize("batch", [1, 3, 8])
def test_greedy_equals_hf_generate(tiny_loaded, batch):
    prompts = random_prompts(tiny_loaded.tokenizer, batch, seed=batch)
    stop = tiny_loaded.stop_criteria()
    greedy = build_decoder("greedy", tiny_loaded.model, tiny_loaded.tokenizer)
    ours = [g.tokens for g in greedy.generate(prompts, 24, stop)]
    assert ours == hf_reference(tiny_loaded, prompts, 24, stop)


def test_greedy_batched_equals_unbatched_and_prune_flag(tiny_llama):
    prompts = random_prompts(tiny_llama.tokenizer, 6, seed=11)
    # make several rows stop early on a frequent token so that pruning actually happens
    first = build_decoder("greedy", tiny_llama.model, tiny_llama.tokenizer).generate(prompts, 20, StopCriteria())
    common = max({t for g in first for t in g.tokens[3:8]}, key=lambda t: sum(t in g.tokens for g in first))
    stop = StopCriteria(eos_ids=(common,))
    for prune in (True, False):
        dec = build_decoder("greedy", tiny_llama.model, tiny_llama.tokenizer, prune_finished=prune)
        batched = dec.generate(prompts, 20, stop)
        single = [dec.generate([p], 20, stop)[0] for p in prompts]
        assert [g.tokens for g in batched] == [g.tokens for g in single]
        assert any(g.stop_reason == "eos" for g in batched)
        assert [g.tokens for g in batched] == hf_reference(tiny_llama, prompts, 20, stop)


def test_eos_stop_and_result_accounting(tiny_llama):
    prompts = random_prompts(tiny_llama.tokenizer, 4, seed=3)
    free = build_decoder("greedy", tiny_llama.model, tiny_llama.tokenizer).generate(prompts, 16, StopCriteria())
    eos = free[0].tokens[5]
    out = build_decoder("greedy", tiny_llama.model, tiny_llama.tokenizer).generate(
        prompts, 16, StopCriteria(eos_ids=(eos,))
    )
    g = out[0]
    assert g.tokens == free[0].tokens[: free[0].tokens.index(eos) + 1]
    assert g.stop_reason == "eos"
    for g in out:
        assert g.accepted == [1] * len(g.tokens)
        assert g.forward_passes == len(g.tokens) and g.tokens_per_forward == 1.0
        assert g.prefill_s > 0 and g.decode_s >= 0
        assert len(g.tokens) <= 16
        assert g.stop_reason in ("eos", "length")


def test_stop_strings_match_hf(tiny_llama):
    tok = tiny_llama.tokenizer
    prompts = random_prompts(tok, 5, seed=5)
    free = build_decoder("greedy", tiny_llama.model, tok).generate(prompts, 20, StopCriteria())
    text = tok.decode(free[1].tokens[4:7])
    stop = StopCriteria(eos_ids=tiny_llama.eos_ids, stop_strings=(text,))
    ours = build_decoder("greedy", tiny_llama.model, tok).generate(prompts, 20, stop)
    assert ours[1].stop_reason == "stop_string"
    assert text in tok.decode(ours[1].tokens) and text not in tok.decode(ours[1].tokens[:-1])
    assert [g.tokens for g in ours] == hf_reference(tiny_llama, prompts, 20, stop)


def test_stop_tracker_trims_multi_token_chunks():
    class CharTok:
        def decode(self, ids, skip_special_tokens=False):
            return "".join(chr(96 + i) for i in ids)

    tr = StopTracker(2, StopCriteria(eos_ids=(26,), stop_strings=("cd",)), CharTok(), max_new_tokens=6)
    assert tr.feed(0, [1, 3, 4, 5]) == 3 and tr.tokens[0] == [1, 3, 4] and tr.reason[0] == "stop_string"
    assert tr.feed(1, [1, 26, 2]) == 2 and tr.reason[1] == "eos"
    assert tr.all_done
    tr2 = StopTracker(1, StopCriteria(), CharTok(), max_new_tokens=3)
    assert tr2.feed(0, [1, 1, 1, 1, 1]) == 3 and tr2.reason[0] == "length"


def test_left_pad_and_positions():
    ids, mask = left_pad([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert positions_from_mask(mask).tolist() == [[0, 1, 2], [1, 1, 0]]
    with pytest.raises(ValueError):
        left_pad([[1], []], 0)


def test_crop_cache_equals_recompute(tiny_llama):
    model = tiny_llama.model
    ids = torch.tensor([random_prompts(tiny_llama.tokenizer, 1, seed=9)[0] + [40, 41, 42, 43]])
    with torch.inference_mode():
        cache = DynamicCache(config=model.config)
        model(input_ids=ids, cache=cache)
        crop_cache(cache, 3)
        assert cache.get_seq_length() == ids.shape[1] - 3
        after_crop = model(input_ids=ids[:, -3:-2], cache=cache).logits
        fresh = model(input_ids=ids[:, :-2]).logits[:, -1:]
    torch.testing.assert_close(after_crop, fresh, rtol=1e-4, atol=1e-4)
