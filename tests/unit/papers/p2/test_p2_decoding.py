"""`mtp-spec` (paper 2 App. D): lossless against reference greedy (batch 1 and 3, K 1-4, loops, EOS, stop strings,
budget edges), equal to the literal cache-free Algorithm 1 at every step (tokens, drafts, accepted counts, A_j,
C_j^cmp, C_step), and equal to the teacher-forced simulation that AR / CAR come from. Heads trained on the tiny
trunk's own greedy text make drafts often accepted (random heads almost never are)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from mtp_core.decoding import StopCriteria, build_decoder
from mtp_core.io import InputError
from mtp_core.models.heads import save_heads
from mtp_core.models.heads.deepseek import DeepSeekMTPHeads
from mtp_core.models.load import tiny_model, tiny_tokenizer
from mtp_core.papers.p2.acceptance import simulate_steps, teacher_forced_match
from mtp_core.papers.p2.counters import HeadCounters
from mtp_core.papers.p2.decoder import MTPSpecDecoder
from tests.conftest import tiny_spec
from tests.unit.papers.p2.p2_helpers import algorithm1, train_heads

BUDGET = 24


class Recording(MTPSpecDecoder):
    """mtp-spec that keeps every step's drafts."""

    def propose(self, state):
        draft = super().propose(state)
        self.drafts.append(draft.candidates.tolist())
        return draft


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def setup(request):
    """A tiny trunk, prompts of lengths 1..11, and K = 3 heads trained on the trunk's continuations of them."""
    torch.set_num_threads(1)
    trunk, tok = tiny_model(tiny_spec(request.param)).eval(), tiny_tokenizer()
    rng = random.Random(1)
    prompts = [[rng.randrange(3, 259) for _ in range(n)] for n in (1, 4, 7, 11, 5, 9)]
    greedy = build_decoder("greedy", trunk, tok)
    seqs = [p + greedy.generate([p], 40, StopCriteria())[0].tokens for p in prompts]
    return trunk, tok, prompts, greedy, train_heads(trunk, 3, seqs, 120)


def steps_of(result) -> list[int]:
    return [a - 1 for a in result.accepted[1:]]


@pytest.mark.parametrize("depths", [1, 3, 6])
def test_lossless_and_batched(setup, depths):
    trunk, tok, prompts, greedy, heads = setup
    ref = greedy.generate_all(prompts, BUDGET, StopCriteria(), batch_size=1)
    dec = MTPSpecDecoder(trunk, tok, heads=heads, num_drafts=depths)
    one = dec.generate_all(prompts, BUDGET, StopCriteria(), batch_size=1)
    three = dec.generate_all(prompts, BUDGET, StopCriteria(), batch_size=3)
    for r, a, b in zip(ref, one, three):
        assert a.tokens == r.tokens and b.tokens == r.tokens
        assert steps_of(a) == steps_of(b)  # batch rows with holes draft what a lone row drafts
    accepted = sum(sum(steps_of(a)) for a in one)
    assert accepted > 10 * depths**0  # trained heads: drafts are accepted (the cascade's caches are exercised)
    if depths > 1:
        assert max(max(steps_of(a)) for a in one) >= 2


def test_compiled_lossless(setup, traced):
    """`backend: compiled`: the trunk's forwards on the static cache return h^0, the cascade runs eager; greedy's
    tokens in batches of 3 and the drafts a lone eager row accepts. Without a KV cache it is refused."""
    trunk, tok, prompts, greedy, heads = setup
    ref = greedy.generate_all(prompts, BUDGET, StopCriteria(), batch_size=1)
    eager = MTPSpecDecoder(trunk, tok, heads=heads).generate_all(prompts, BUDGET, StopCriteria(), batch_size=1)
    dec = MTPSpecDecoder(trunk, tok, heads=heads, backend="compiled")
    out = dec.generate_all(prompts, BUDGET, StopCriteria(), batch_size=3)
    assert [g.tokens for g in out] == [g.tokens for g in ref]
    assert [steps_of(g) for g in out] == [steps_of(g) for g in eager] and dec.compile_s > 0
    with pytest.raises(InputError, match="without a KV cache"):
        build_decoder("mtp-spec", trunk, tok, heads=heads, kv_cache=False, backend="compiled")


def test_equals_literal_algorithm1(setup):
    """Every step's drafts, accepted count and the counters equal Algorithm 1 run without any cache (its budget
    counts the unverified drafts, so N + D there is N here), for K = 3 and the 3 -> 5 loop."""
    trunk, tok, prompts, _, heads = setup
    for depths in (3, 5):
        dec = Recording(trunk, tok, heads=heads, num_drafts=depths)
        for p in prompts:
            dec.drafts = []
            g = dec.generate([p], BUDGET, StopCriteria())[0]
            tokens, steps, drafts, a, c_cmp, c_step = algorithm1(trunk, heads, p, depths, BUDGET + depths)
            assert tokens[:BUDGET] == g.tokens
            assert steps == steps_of(g) and [d[0] for d in dec.drafts] == drafts
            counters = HeadCounters.of_steps(steps_of(g), depths)
            assert counters.accepted.tolist() == a and counters.compared.tolist() == c_cmp
            assert counters.steps == c_step


@pytest.mark.parametrize("depths", [3, 6])
def test_simulation_equals_decoder(setup, depths):
    """The teacher-forced simulation over greedy continuations (past the budget, ignoring stops) gives the
    decoder's accepted count at every step, with an EOS and a stop string ending rows early."""
    trunk, tok, prompts, greedy, heads = setup
    conts = greedy.generate_all(prompts, BUDGET + depths + 1, StopCriteria(), batch_size=1)
    # stops that end some rows inside the budget: an EOS id and a stop string taken from the continuations
    stop = StopCriteria(eos_ids=(conts[1].tokens[5],), stop_strings=(tok.decode(conts[2].tokens[7:9]),))
    dec = MTPSpecDecoder(trunk, tok, heads=heads, num_drafts=depths)
    ref = greedy.generate_all(prompts, BUDGET, stop, batch_size=1)
    got = dec.generate_all(prompts, BUDGET, stop, batch_size=3)
    assert any(r.stop_reason != "length" for r in ref)
    for p, c, g, r in zip(prompts, conts, got, ref):
        assert g.tokens == r.tokens and g.stop_reason == r.stop_reason
        ids = p + c.tokens
        match = teacher_forced_match(trunk, heads, ids, len(p) - 1, depths)
        assert simulate_steps(match, ids, len(p), depths, BUDGET, stop, tok) == steps_of(g)


@pytest.mark.parametrize("budget", [1, 2, 5])
def test_budget_edges_and_saved_heads(setup, budget, tmp_path):
    trunk, tok, prompts, greedy, heads = setup
    save_heads(heads, tmp_path / "h", trunk)
    dec = build_decoder("mtp-spec", trunk, tok, heads=str(tmp_path / "h"), num_drafts=4)
    for r, g in zip(
        greedy.generate_all(prompts, budget, StopCriteria(), 2), dec.generate_all(prompts, budget, StopCriteria(), 2)
    ):
        assert g.tokens == r.tokens and len(g.tokens) == budget


def test_untrained_heads_stay_lossless():
    trunk, tok = tiny_model(tiny_spec("qwen3")).eval(), tiny_tokenizer()
    heads = DeepSeekMTPHeads.from_trunk(trunk, 2)
    prompts = [[5, 6, 7], [9] * 6, [30, 40]]
    ref = build_decoder("greedy", trunk, tok).generate_all(prompts, 16, StopCriteria(), batch_size=3)
    out = MTPSpecDecoder(trunk, tok, heads=heads, num_drafts=4).generate_all(prompts, 16, StopCriteria(), batch_size=3)
    assert [o.tokens for o in out] == [r.tokens for r in ref]


def test_counters_hand_example():
    c = HeadCounters.of_steps([2, 0, 4, 1], 4)
    assert c.accepted.tolist() == [3, 2, 1, 1] and c.compared.tolist() == [4, 3, 2, 1] and c.steps == 4
    assert c.ar == pytest.approx([0.75, 2 / 3, 0.5, 1.0]) and c.car == pytest.approx([0.75, 0.5, 0.25, 0.25])
    assert c.tau == pytest.approx(2.75)
    assert np.allclose(c.car, np.cumprod(c.ar))  # CAR_j = prod_{i<=j} AR_i
    pooled = c + HeadCounters.of_steps([1], 4)  # pooled over samples, not a mean of per-sample rates
    assert pooled.ar[0] == pytest.approx(4 / 5)


@pytest.mark.parametrize("depths", [1, 3, 6])
def test_without_kv_cache_lossless_and_equal_to_the_cached_decoder(setup, depths):
    """`kv_cache: false` (App. D's protocol: every step recomputes the whole sequence): the same tokens as greedy and
    the same accepted count at every step as the cached decoder, with an EOS and a stop string, batch 1 and 3."""
    trunk, tok, prompts, greedy, heads = setup
    conts = greedy.generate_all(prompts, BUDGET, StopCriteria(), batch_size=1)
    stop = StopCriteria(eos_ids=(conts[1].tokens[5],), stop_strings=(tok.decode(conts[2].tokens[7:9]),))
    ref = greedy.generate_all(prompts, BUDGET, stop, batch_size=1)
    cached = MTPSpecDecoder(trunk, tok, heads=heads, num_drafts=depths).generate_all(prompts, BUDGET, stop, 1)
    nokv = build_decoder("mtp-spec", trunk, tok, heads=heads, num_drafts=depths, kv_cache=False)
    one, three = nokv.generate_all(prompts, BUDGET, stop, 1), nokv.generate_all(prompts, BUDGET, stop, 3)
    for p, r, c, a, b in zip(prompts, ref, cached, one, three):
        assert a.tokens == r.tokens == b.tokens and a.stop_reason == r.stop_reason
        assert steps_of(a) == steps_of(c) == steps_of(b)
        assert a.extra["drafted"] == [0] + [depths] * (len(a.accepted) - 1)
        # no cache: verification i runs the whole sequence, the tokens emitted so far and the D drafts
        assert a.extra["chunk_rows"][1:] == [len(p) + sum(a.accepted[:i]) + depths for i in range(1, len(a.accepted))]
    assert sum(sum(steps_of(a)) for a in one) > 10  # drafts are accepted: the uncached cascade is exercised


def test_without_kv_cache_equals_literal_algorithm1(setup):
    trunk, tok, prompts, _, heads = setup
    dec = MTPSpecDecoder(trunk, tok, heads=heads, num_drafts=3, kv_cache=False)
    for p in prompts:
        g = dec.generate([p], BUDGET, StopCriteria())[0]
        tokens, steps, _, a, c_cmp, c_step = algorithm1(trunk, heads, p, 3, BUDGET + 3)
        assert tokens[:BUDGET] == g.tokens and steps == steps_of(g)
        counters = HeadCounters.of_steps(steps_of(g), 3)
        assert (counters.accepted.tolist(), counters.compared.tolist(), counters.steps) == (a, c_cmp, c_step)


@pytest.mark.parametrize("budget", [1, 2, 5])
def test_uncached_greedy_is_greedy(setup, budget):
    trunk, tok, prompts, greedy, _ = setup
    conts = greedy.generate_all(prompts, budget + 4, StopCriteria(), batch_size=1)
    stop = StopCriteria(eos_ids=(conts[0].tokens[-2],))
    ref = greedy.generate_all(prompts, budget, stop, batch_size=2)
    out = build_decoder("greedy-uncached", trunk, tok).generate_all(prompts, budget, stop, batch_size=2)
    assert [o.tokens for o in out] == [r.tokens for r in ref]
    assert all(o.accepted == [1] * len(o.tokens) for o in out)
