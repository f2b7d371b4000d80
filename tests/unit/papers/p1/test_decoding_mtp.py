"""Paper 1 decoding (Static-k, ConfAdapt): the KV-cached, batched decoder equals an obviously correct
reference that recomputes prompt + emitted tokens + masks from scratch at every step; k=1 and tau>1 equal
greedy; tau=0 equals Static-k_max; the acceptance rule on hand-made confidences; EOS trimming; accounting.

The tiny models are untrained (mask predictions are junk), which does not matter for exactness.
"""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from mtp_core.decoding import StopCriteria, build_decoder, decoders
from mtp_core.models.load import tiny_model, tiny_tokenizer
from mtp_core.papers.p1.decoders import ConfAdaptDecoder, MaskMTPDecoder, accept_count, compact_cache, top1_confidence
from mtp_core.papers.p1.mask_token import add_mask_token
from tests.conftest import random_prompts, tiny_spec

MAX_NEW = 20


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny forwards are dominated by thread hand-offs on a loaded machine: run them on one thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def mtp_model(request):
    """A tiny random model with the `<MTP>` token added (its own copy: the session fixtures stay untouched)."""
    model, tok = tiny_model(tiny_spec(request.param)), tiny_tokenizer()
    add_mask_token(model, tok, seed=0)
    return model.eval(), tok


@torch.inference_mode()
def reference_decode(model, prompt, k, max_new, accept, mask_id, eos=(), conf_log=None):
    """Obviously correct Static-k / ConfAdapt: no cache; every step runs prompt + emitted + (k-1) masks from
    scratch and reads the last k positions. Returns (tokens, accepted)."""
    seq, out, acc = list(prompt), [], []
    while True:
        ks = min(k, max_new - len(out))
        logits = model(input_ids=torch.tensor([seq + [mask_id] * (ks - 1)])).logits[:, -ks:]
        if conf_log is not None:
            conf_log.append(softmax_top1(logits)[0])
        c = min(int(accept(logits)[0]), ks)
        toks = logits[0].argmax(-1)[:c].tolist()
        acc.append(c)
        for t in toks:
            out.append(t)
            if t in eos or len(out) >= max_new:
                return out, acc
        seq += toks


def static_rule(logits):
    return torch.full((logits.shape[0],), logits.shape[1])


def leading_run(confidences, tau, k_max):
    """ConfAdapt's rule written out (paper 1 §4.6), sharing nothing with `accept_count`: walk the positions from
    the first, stop at the first whose confidence is below tau or at k_max; at least one token."""
    n = 0
    for c in confidences[:k_max]:
        if c < tau:
            break
        n += 1
    return max(1, n)


def softmax_top1(logits):
    """Per position, the largest softmax probability (float64, each position on its own): `[..., V] -> [...]`."""
    return logits.double().softmax(-1).max(-1).values


def conf_rule(tau, k_max):
    """The reference ConfAdapt acceptance of a step's logits `[B, K, V]`: `leading_run` of each row's per-position
    softmax top-1 probabilities (not `accept_count` / `top1_confidence`, which the decoder uses)."""
    return lambda logits: torch.tensor([leading_run(row.tolist(), tau, k_max) for row in softmax_top1(logits)])


def parity_rule(logits):
    """A test-only acceptance rule with very uneven per-row counts: 1 + (argmax at position 0) mod 4, at most K.

    Like the real rules it is invariant under capping K (what the decoder does near the length limit)."""
    return (1 + logits[:, 0].argmax(-1) % 4).clamp(max=logits.shape[1])


class ParityDecoder(MaskMTPDecoder):
    """Exercises the batched machinery (holes, per-row cache validity) harder than an untrained model's ConfAdapt."""

    name = "_test-parity"

    def predictions_per_step(self) -> int:
        return self.params["k"]

    def accept(self, logits):
        return parity_rule(logits)


def test_compact_cache_right_aligns_valid_slots():
    cache = DynamicCache()
    keys = torch.arange(2 * 5, dtype=torch.float).view(2, 1, 5, 1).expand(2, 2, 5, 3).contiguous()
    cache.update(keys, keys + 100, 0)
    kv_mask = torch.tensor([[0, 1, 0, 1, 1], [1, 0, 0, 1, 0]], dtype=torch.bool)
    new = compact_cache(cache, kv_mask)
    assert new.tolist() == [[True, True, True], [False, True, True]]
    k = cache.layers[0].keys
    assert k[0, 0, :, 0].tolist() == [1, 3, 4] and k[1, 0, 1:, 0].tolist() == [5, 8]
    assert cache.layers[0].values[0, 1, :, 2].tolist() == [101, 103, 104]
    assert compact_cache(cache, new) is new  # nothing left to drop


def check_accounting(g, max_new=MAX_NEW):
    assert g.forward_passes == len(g.accepted) == len(g.extra["chunk_tokens"]) == len(g.extra["refed"])
    assert sum(g.accepted) >= len(g.tokens) and 1 <= len(g.tokens) <= max_new
    if g.stop_reason == "length":
        assert sum(g.accepted) == len(g.tokens) == max_new
    assert g.extra["refed"][0] == 0 and g.extra["refed"][1:] == g.accepted[:-1]  # re-fed = accepted last step
    assert g.prefill_s > 0 and g.decode_s >= 0


# --------------------------------------------------------------------------------------------- acceptance rule


def test_accept_count_hand_made():
    conf = torch.tensor(
        [
            [0.95, 0.92, 0.85, 0.97],  # run of 2: the third position breaks it
            [0.85, 0.95, 0.99, 0.99],  # nothing leads above tau: falls back to 1
            [0.99, 0.99, 0.99, 0.99],  # all
            [0.90, 0.90, 0.10, 0.90],  # >= tau is accepted (the official stop test is conf < tau)
        ]
    )
    assert accept_count(conf, 0.9).tolist() == [2, 1, 4, 2]
    assert accept_count(conf, 0.9, k_max=3).tolist() == [2, 1, 3, 2]
    assert accept_count(conf, 0.9, k_max=1).tolist() == [1, 1, 1, 1]
    assert accept_count(conf, 1.01).tolist() == [1, 1, 1, 1]
    assert accept_count(conf, 0.0).tolist() == [4, 4, 4, 4]
    assert accept_count(conf, 0.0, k_max=16).tolist() == [4, 4, 4, 4]  # k_max above K: K
    assert int(accept_count(torch.tensor([0.5, 0.99]), 0.6)) == 1  # one row, unbatched
    with pytest.raises(ValueError):
        accept_count(torch.empty(2, 0), 0.5)


def test_accept_count_equals_the_rule_written_out():
    """`accept_count` against `leading_run` on random confidences drawn from a few levels, so that values equal to
    tau, runs broken in the middle and all-accept rows all occur, for several tau and k_max. The levels are exact
    in float32, so that 'equal to tau' means the same in the tensor and in Python."""
    g = torch.Generator().manual_seed(0)
    levels = torch.tensor([0.5, 0.75, 0.875, 0.9375, 1.0])
    conf = levels[torch.randint(0, len(levels), (200, 6), generator=g)]
    for tau in (0.5, 0.75, 0.875, 0.9375, 1.0, 1.01):
        for k_max in (None, 1, 3, 6, 16):
            want = [leading_run(row, tau, k_max or 6) for row in conf.tolist()]
            assert accept_count(conf, tau, k_max).tolist() == want, (tau, k_max)
    assert len({leading_run(row, 0.875, 6) for row in conf.tolist()}) == 6  # every count 1..6 was exercised


def test_top1_confidence_is_per_position_softmax_max():
    logits = torch.randn(3, 5, 11)
    torch.testing.assert_close(top1_confidence(logits), logits.softmax(-1).max(-1).values)


# --------------------------------------------------------------------------------------------- exactness


def test_registered_and_lossy():
    assert decoders()["static-k"].lossless is False and decoders()["conf-adapt"].lossless is False
    assert issubclass(decoders()["static-k"], MaskMTPDecoder) and decoders()["conf-adapt"] is ConfAdaptDecoder


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("batch", [1, 3])
def test_static_k_with_cache_equals_no_cache_reference(mtp_model, k, batch):
    model, tok = mtp_model
    mid = model.config.mtp_mask_token_id
    prompts = _prompts(tok, batch, seed=10 * k + batch)
    out = build_decoder("static-k", model, tok, k=k).generate(prompts, MAX_NEW, StopCriteria())
    for p, g in zip(prompts, out):
        ref_tokens, ref_acc = reference_decode(model, p, k, MAX_NEW, static_rule, mid)
        assert g.tokens == ref_tokens and g.accepted == ref_acc
        check_accounting(g)
        assert g.stop_reason == "length"
        # §4.5: the prefill feeds prompt + k-1 masks, every later forward 2k-1 tokens (k re-fed + k-1 masks)
        assert g.extra["chunk_tokens"][0] == len(p) + k - 1
        assert all(c == 2 * k - 1 for c in g.extra["chunk_tokens"][1:-1])


@pytest.mark.parametrize("batch,compact_at", [(1, 0.25), (3, 0.25), (3, 0.0), (3, 1.0)])
def test_uneven_acceptance_batched_equals_reference(mtp_model, batch, compact_at):
    """Rows accept different counts every step: holes in the batched cache must never change a row's output,
    whether the cache is compacted at every chance (0.0), never (1.0) or at the default threshold."""
    model, tok = mtp_model
    mid = model.config.mtp_mask_token_id
    prompts = _prompts(tok, batch, seed=7 + batch)
    out = ParityDecoder(model, tok, k=4, compact_at=compact_at).generate(prompts, MAX_NEW, StopCriteria())
    counts = set()
    for p, g in zip(prompts, out):
        ref_tokens, ref_acc = reference_decode(model, p, 4, MAX_NEW, parity_rule, mid)
        assert g.tokens == ref_tokens and g.accepted == ref_acc
        check_accounting(g)
        counts |= set(g.accepted[:-1])
    assert len(counts) >= 3  # the test really had uneven acceptance


def test_conf_adapt_batched_equals_reference(mtp_model):
    model, tok = mtp_model
    mid = model.config.mtp_mask_token_id
    prompts = _prompts(tok, 3, seed=5)
    # a tau between the tiny model's confidences, far (> 1e-4) from every confidence the reference sees,
    # so that float round-off between cached and uncached forwards cannot flip a decision
    for tau in (0.08, 0.085, 0.075, 0.09, 0.07, 0.095, 0.065, 0.1, 0.06, 0.11, 0.12):
        log: list[torch.Tensor] = []
        refs = [reference_decode(model, p, 5, MAX_NEW, conf_rule(tau, 5), mid, conf_log=log) for p in prompts]
        margin = min(float((c - tau).abs().min()) for c in log)
        counts = {c for _, acc in refs for c in acc[:-1]}
        if margin > 1e-4 and len(counts) >= 2:
            break
    else:
        pytest.fail("no tau gives mixed acceptance with a safe margin")
    out = build_decoder("conf-adapt", model, tok, tau=tau, k_max=5).generate(prompts, MAX_NEW, StopCriteria())
    for g, (ref_tokens, ref_acc) in zip(out, refs):
        assert g.tokens == ref_tokens and g.accepted == ref_acc
        check_accounting(g)


def test_static_k1_and_conf_adapt_tau_above_one_equal_greedy(mtp_model):
    model, tok = mtp_model
    prompts = _prompts(tok, 4, seed=3)
    free = build_decoder("greedy", model, tok).generate(prompts, MAX_NEW, StopCriteria())
    stop = StopCriteria(eos_ids=(free[1].tokens[6], free[2].tokens[3]))  # some rows stop early: pruning
    ref = [g.tokens for g in build_decoder("greedy", model, tok).generate(prompts, MAX_NEW, stop)]
    assert any(len(t) < MAX_NEW for t in ref)
    for name, params in [("static-k", {"k": 1}), ("conf-adapt", {"tau": 1.5, "k_max": 4})]:
        out = build_decoder(name, model, tok, **params).generate(prompts, MAX_NEW, stop)
        assert [g.tokens for g in out] == ref, name
        assert all(g.accepted == [1] * len(g.tokens) for g in out)


def test_conf_adapt_tau_zero_equals_static_k_max(mtp_model):
    model, tok = mtp_model
    prompts = _prompts(tok, 3, seed=4)
    ca = build_decoder("conf-adapt", model, tok, tau=0.0, k_max=4).generate(prompts, MAX_NEW, StopCriteria())
    st = build_decoder("static-k", model, tok, k=4).generate(prompts, MAX_NEW, StopCriteria())
    assert [g.tokens for g in ca] == [g.tokens for g in st]
    assert [g.accepted for g in ca] == [g.accepted for g in st]


def test_eos_inside_a_chunk_trims_and_stops(mtp_model):
    model, tok = mtp_model
    prompts = _prompts(tok, 3, seed=6)
    k = 4
    free = build_decoder("static-k", model, tok, k=k).generate(prompts, MAX_NEW, StopCriteria())
    # an EOS that first occurs strictly inside a chunk of row 0 (not its last token)
    idx = next(i for i, t in enumerate(free[0].tokens) if i % k != k - 1 and t not in free[0].tokens[:i])
    eos = free[0].tokens[idx]
    out = build_decoder("static-k", model, tok, k=k).generate(prompts, MAX_NEW, StopCriteria(eos_ids=(eos,)))
    g = out[0]
    assert g.tokens == free[0].tokens[: idx + 1] and g.stop_reason == "eos"
    assert len(g.accepted) == idx // k + 1 and sum(g.accepted) > len(g.tokens)  # the rest of the chunk is dropped
    for p, g, f in zip(prompts, out, free):
        check_accounting(g)
        ref_tokens, _ = reference_decode(model, p, k, MAX_NEW, static_rule, model.config.mtp_mask_token_id, (eos,))
        assert g.tokens == ref_tokens
        if eos not in f.tokens:
            assert g.tokens == f.tokens


def test_stop_string_inside_a_chunk(mtp_model):
    model, tok = mtp_model
    prompts = _prompts(tok, 2, seed=8)
    free = build_decoder("static-k", model, tok, k=3).generate(prompts, MAX_NEW, StopCriteria())
    text = tok.decode(free[1].tokens[4:6])
    out = build_decoder("static-k", model, tok, k=3).generate(prompts, MAX_NEW, StopCriteria(stop_strings=(text,)))
    g = out[1]
    assert g.stop_reason == "stop_string" and text in tok.decode(g.tokens) and text not in tok.decode(g.tokens[:-1])
    assert g.tokens == free[1].tokens[: len(g.tokens)]


@pytest.mark.parametrize("option", [{"prune_finished": False}, {"pad_small_chunks": False}])
def test_options_do_not_change_outputs(mtp_model, option):
    model, tok = mtp_model
    prompts = _prompts(tok, 3, seed=9)
    free = build_decoder("static-k", model, tok, k=2).generate(prompts, MAX_NEW, StopCriteria())
    stop = StopCriteria(eos_ids=(free[0].tokens[5],))
    for name, params in [("static-k", {"k": 2}), ("conf-adapt", {"tau": 0.09, "k_max": 3})]:
        base = build_decoder(name, model, tok, **params).generate(prompts, MAX_NEW, stop)
        other = build_decoder(name, model, tok, **params, **option).generate(prompts, MAX_NEW, stop)
        assert [g.tokens for g in other] == [g.tokens for g in base]
        assert [g.accepted for g in other] == [g.accepted for g in base]


def test_compiled_equals_the_reference_and_eager(mtp_model, traced):
    """`backend: compiled`: rows of pairwise different lengths accepting unevenly (holes in a static batch whose
    slots outrun its first cache, which grows), Static-k at a budget that caps the last step's k, ConfAdapt, and
    an EOS inside a chunk; tokens and accepted counts equal the uncached reference and the eager decoder's."""
    model, tok = mtp_model
    mid = model.config.mtp_mask_token_id
    prompts, max_new = _prompts(tok, 3, seed=11), 45
    dec = ParityDecoder(model, tok, k=4, backend="compiled")
    out = dec.generate(prompts, max_new, StopCriteria())
    for p, g in zip(prompts, out):
        assert (g.tokens, g.accepted) == reference_decode(model, p, 4, max_new, parity_rule, mid)
        check_accounting(g, max_new)
        assert set(g.extra["chunk_rows"][1:]) <= {4, 8}  # the bucket of every step's chunk
    assert dec.static.length > 64 and dec.compile_s > 0  # grew past its first cache (64 slots)
    free = build_decoder("static-k", model, tok, k=3).generate(prompts, MAX_NEW, StopCriteria())
    stop = StopCriteria(eos_ids=(free[0].tokens[4],))
    for name, params, budget, stops in [
        ("static-k", {"k": 3}, MAX_NEW - 1, StopCriteria()),
        ("static-k", {"k": 3}, MAX_NEW, stop),
        ("conf-adapt", {"tau": 0.09, "k_max": 5}, MAX_NEW, StopCriteria()),
    ]:
        eager = build_decoder(name, model, tok, **params).generate(prompts, budget, stops)
        comp = build_decoder(name, model, tok, **params, backend="compiled").generate(prompts, budget, stops)
        assert [(g.tokens, g.accepted) for g in comp] == [(g.tokens, g.accepted) for g in eager], (name, params)
        assert comp[0].stop_reason == ("eos" if stops is stop else "length")


# --------------------------------------------------------------------------------------------- parameters


def test_mask_id_resolution_and_errors(mtp_model):
    model, tok = mtp_model
    mid = model.config.mtp_mask_token_id
    assert build_decoder("static-k", model, tok, k=3).params["mask_id"] == mid
    assert {"tau": 0.9, "k_max": 16, "mask_id": mid}.items() <= build_decoder("conf-adapt", model, tok).params.items()
    other = build_decoder("static-k", model, tok, k=3, mask_id=5)
    assert other.mask_id == 5
    with pytest.raises(ValueError, match="'k'"):
        build_decoder("static-k", model, tok)
    for bad in (0, -1, 2.5):
        with pytest.raises(ValueError, match="integer >= 1"):
            build_decoder("static-k", model, tok, k=bad)
    with pytest.raises(ValueError, match="outside"):
        build_decoder("static-k", model, tok, k=2, mask_id=10**6)
    plain, plain_tok = tiny_model(tiny_spec("llama")), tiny_tokenizer()  # no mask token
    with pytest.raises(ValueError, match="mtp_mask_token_id"):
        build_decoder("conf-adapt", plain, plain_tok, tau=0.9, k_max=4)
    build_decoder("static-k", plain, plain_tok, k=1)  # k=1 needs no mask


def _prompts(tok, n: int, seed: int) -> list[list[int]]:
    """n prompts of pairwise different lengths."""
    return random_prompts(tok, n, seed, lengths=(1, 10), distinct_lengths=True)
