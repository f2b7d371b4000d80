"""Paper 3 probing decoder: draft-tree builder (block complexity, cumulative-probability order against brute force,
pruning by hand, fixed/top-1 shapes), mask embeddings (vocab mean, Gaussian, last-n, prompt-mean update rule),
mask logits anchored at the accepted node equal a plain forward, no extra forward, the wall-clock guard's
decisions, and losslessness against reference greedy for every strategy and tree mode, batch 1 and > 1."""

from __future__ import annotations

import itertools

import pytest
import torch

from mtp_core.decoding import StopCriteria, build_decoder, decoders
from mtp_core.papers.p3.draft_trees import (
    ProbeCandidates,
    anchored_mask_logits,
    dynamic_counts,
    fixed_buffers,
    fixed_candidate_tokens,
    mask_chain_parents,
    nodes_for_bc,
    pruned_topk,
    top1_buffers,
    top1_candidate_tokens,
    top1_candidates,
    tree_nodes,
)
from mtp_core.papers.p3.mask_embeddings import (
    ema_update,
    last_n_mask,
    masked_mean,
    vocab_gaussian_embedding,
    vocab_mean_embedding,
    vocab_rows,
)
from mtp_core.papers.p3.probing import HitStats, ProbingDecoder
from tests.conftest import PROMPT_WORDS, random_prompts

# ---------------------------------------------------------------- tree builder


def test_block_complexity_node_budget():
    # (N + 1)(1 + m) <= BC: BC 10/30/60 -> 4/14/29 nodes with one mask, 2/9/19 with two
    assert [nodes_for_bc(bc, 1) for bc in (10, 30, 60)] == [4, 14, 29]
    assert [nodes_for_bc(bc, 2) for bc in (10, 30, 60)] == [2, 9, 19]
    with pytest.raises(ValueError):
        nodes_for_bc(1, 1)
    assert tree_nodes((3, 2), "top1") == 5 and tree_nodes((3, 2), "fixed") == 9


def test_top1_and_fixed_buffers_shapes():
    b = top1_buffers((3, 2))
    assert b.parents.tolist() == [-1, 0, 0, 0, 1, 1] and b.position_ids.tolist() == [0, 1, 1, 1, 2, 2]
    assert b.ranks.tolist() == [0, 0, 1, 2, 0, 1]
    b = top1_buffers((2, 1, 1))
    assert b.parents.tolist() == [-1, 0, 0, 1, 3]
    assert top1_buffers(()).num_nodes == 1
    f = fixed_buffers((2, 2))
    assert f.parents.tolist() == [-1, 0, 0, 1, 1, 2, 2] and f.ranks.tolist() == [0, 0, 1, 0, 1, 0, 1]


def test_mask_chains_and_anchoring():
    # 3 nodes, chains of 2: extra rows (node0: 3,4) (node1: 5,6) (node2: 7,8) in chunk numbering
    assert mask_chain_parents(3, 2).tolist() == [0, 3, 1, 5, 2, 7]
    assert mask_chain_parents(2, 1).tolist() == [0, 1]
    logits = torch.arange(2 * 6 * 1, dtype=torch.float).reshape(2, 6, 1)
    got = anchored_mask_logits(logits, torch.tensor([2, 0]), 2)
    assert got[..., 0].tolist() == [[4.0, 5.0], [6.0, 7.0]]


def test_pruning_rule_by_hand():
    # probabilities over 8 tokens; root = 3 is the most probable depth-1 token, so 5 moves up and 1 follows
    p1 = torch.tensor([0.01, 0.15, 0.02, 0.40, 0.03, 0.30, 0.05, 0.04])
    p2 = torch.tensor([0.02, 0.05, 0.03, 0.20, 0.11, 0.35, 0.15, 0.09])  # parent 5 and root 3 lead
    logits = torch.stack([p1, p2]).log()[None]  # [1, 2, 8]
    root = torch.tensor([3])
    c = top1_candidates(logits, root, k=3, prune=True)
    assert c.ids[0].tolist() == [[5, 1, 6], [6, 4, 7]]
    assert torch.allclose(c.probs[0, 0], torch.tensor([0.30, 0.15, 0.05]))
    c0 = top1_candidates(logits, root, k=3, prune=False)
    assert c0.ids[0].tolist() == [[3, 5, 1], [5, 3, 6]]
    # fully expanded: each depth-1 node's children skip that node's token and the root
    tok = fixed_candidate_tokens(logits, root, (2, 2), prune=True)
    assert tok[0].tolist() == [5, 1, 6, 4, 5, 6]
    assert fixed_candidate_tokens(logits, root, (2, 2), prune=False)[0].tolist() == [3, 5, 5, 3, 5, 3]
    # the generic helper: per-parent exclusions, -1 = nothing excluded
    ids, pr = pruned_topk(p1[None], 2, torch.tensor([[[3, -1], [5, 1]]]))
    assert ids[0].tolist() == [[5, 1], [3, 6]] and torch.allclose(pr[0, 1], torch.tensor([0.40, 0.05]))


def brute_force_best(values: torch.Tensor, n: int) -> float:
    """Max total cumulative probability over every Top-1-expansion tree with n nodes (counts per depth)."""
    _, m, k = values.shape
    mean = values.mean(0)
    best = -1.0
    for counts in itertools.product(range(k + 1), repeat=m):
        if sum(counts) != n or any(counts[d] and not counts[d - 1] for d in range(1, m)):
            continue
        best = max(best, sum(float(mean[d, : counts[d]].sum()) for d in range(m)))
    return best


@pytest.mark.parametrize("seed", range(6))
def test_dynamic_tree_matches_brute_force(seed):
    gen = torch.Generator().manual_seed(seed)
    b, m, v, k = (1 if seed < 3 else 3), (2 if seed % 2 == 0 else 3), 12, 4
    logits = torch.randn(b, m, v, generator=gen) * 2.0
    root = torch.randint(0, v, (b,), generator=gen)
    cands = top1_candidates(logits, root, k, prune=bool(seed % 3))
    vals = cands.slot_values()
    # the cumulative probability of slot (d, j) is the product of the Top-1 chain above it and p_d[j]
    for d in range(m):
        chain = torch.prod(cands.probs[:, :d, 0], dim=1) if d else torch.ones(b)
        assert torch.allclose(vals[:, d], chain[:, None] * cands.probs[:, d])
    for n in range(0, m * k + 1):
        counts = dynamic_counts(vals, n)
        assert sum(counts) == n
        got = sum(float(vals.mean(0)[d, :c].sum()) for d, c in enumerate(counts))
        assert got == pytest.approx(brute_force_best(vals, n), abs=1e-6)
        # a valid Top-1 tree: no depth without its parent depth
        assert all(counts[d - 1] > 0 for d in range(1, len(counts)))
        toks = top1_candidate_tokens(cands, counts)
        assert toks.shape == (b, n)


def test_dynamic_tree_adapts_to_confidence():
    confident = ProbeCandidates(
        torch.zeros(1, 2, 4, dtype=torch.long), torch.tensor([[[0.9, 0.05, 0.02, 0.01], [0.8, 0.1, 0.05, 0.01]]])
    )
    unsure = ProbeCandidates(
        torch.zeros(1, 2, 4, dtype=torch.long), torch.tensor([[[0.3, 0.25, 0.2, 0.15], [0.3, 0.2, 0.1, 0.1]]])
    )
    assert dynamic_counts(confident.slot_values(), 4) == (2, 2)  # deeper when confident
    assert dynamic_counts(unsure.slot_values(), 4) == (4,)  # wider when unsure


# ---------------------------------------------------------------- mask embeddings


def test_vocab_mean_and_gaussian_use_tokenizer_rows(tiny_llama):
    model, tok = tiny_llama.model, tiny_llama.tokenizer
    w = model.get_input_embeddings().weight
    n = vocab_rows(model, tok)
    assert n == len(tok) < w.shape[0]  # the tiny models pad the matrix beyond the tokenizer
    vm = vocab_mean_embedding(w, n)
    assert torch.allclose(vm, w[:n].double().mean(0).float(), atol=1e-6)
    assert not torch.allclose(vm, w.mean(0), atol=1e-4)
    dec = build_decoder("probing", model, tok, strategy="vocab_mean", scale=2.0)
    ids = torch.tensor([[5, 6, 7], [2, 8, 9]])
    e = dec.initial_embeddings(ids, torch.tensor([[1, 1, 1], [0, 1, 1]]))
    assert torch.allclose(e, vm.expand(2, -1))
    assert torch.allclose(dec._mask_inputs(e, 3)[1, 2], 2 * vm)
    g = vocab_gaussian_embedding(w, n, seed=3)
    z = torch.randn(w.shape[1], generator=torch.Generator().manual_seed(3))
    assert torch.allclose(g, w[:n].mean(0) + w[:n].std(0) * z, atol=1e-6)
    assert torch.equal(g, vocab_gaussian_embedding(w, n, seed=3))
    assert not torch.equal(g, vocab_gaussian_embedding(w, n, seed=4))


def test_prompt_and_last_n_embeddings_respect_padding():
    emb = torch.arange(2 * 4 * 2, dtype=torch.float).reshape(2, 4, 2)
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    assert masked_mean(emb, mask).tolist() == [[5.0, 6.0], [11.0, 12.0]]
    assert last_n_mask(mask, 1).tolist() == [[0, 0, 0, 1], [0, 0, 0, 1]]
    assert last_n_mask(mask, 3).tolist() == [[0, 0, 1, 1], [0, 1, 1, 1]]


def test_prompt_mean_update_rule_by_hand():
    e = torch.tensor([[0.0, 0.0], [1.0, 1.0]])
    new = torch.tensor([[[2.0, 0.0], [0.0, 4.0]], [[3.0, 3.0], [9.0, 9.0]]])  # row 1 has one real token
    out = ema_update(e, new, torch.tensor([2, 1]), alpha=0.5)
    # row 0: e1 = 0.5*0 + 0.5*[2,0] = [1,0]; e2 = 0.5*[1,0] + 0.5*[0,4] = [0.5,2]; row 1: 0.5*1 + 0.5*3 = 2
    assert out.tolist() == [[0.5, 2.0], [2.0, 2.0]]
    assert torch.equal(ema_update(e, new, torch.tensor([0, 0]), 0.3), e)


class Recorder(ProbingDecoder):
    """Records, at every proposal: the history, the mask embedding state, the chunk size and mask input of the draft,
    and the mask logits the decoder itself drafts from (the `probe` handed to `build_tree`), in `self.log`."""

    def propose(self, state):
        rec = {"history": [list(h) for h in state.history], "emb": None}
        self.log = getattr(self, "log", [])
        self.log.append(rec)
        draft = super().propose(state)
        rec["emb"] = state.data["emb"].clone()
        if draft is not None:
            rec["rows"] = draft.buffers.num_nodes + int(draft.extra_parents.numel())
            rec["mask_in"] = draft.extra_embeds[:, 0].clone()
        return draft

    def build_tree(self, probe, root, *args, **kwargs):
        self.log[-1]["probe"] = probe.clone()
        return super().build_tree(probe, root, *args, **kwargs)


def test_prompt_mean_state_follows_generated_tokens(tiny_llama):
    model, tok = tiny_llama.model, tiny_llama.tokenizer
    prompt = tok("the cat sat on a mat").input_ids
    dec = Recorder(model, tok, strategy="prompt_mean", alpha=0.25, bc=10)
    dec.generate([prompt], 12, StopCriteria())
    emb = model.get_input_embeddings().weight.float()
    e = emb[prompt].mean(0)
    folded = len(prompt)
    for rec in dec.log:
        h = rec["history"][0]
        for t in h[folded:]:
            e = 0.75 * e + 0.25 * emb[t]
        folded = len(h)
        assert torch.allclose(rec["emb"][0], e, atol=1e-5)


# ---------------------------------------------------------------- anchoring, forwards, losslessness


@pytest.mark.parametrize("m", [1, 2])
def test_drafts_come_from_the_masks_of_the_last_accepted_node(tiny_loaded, m):
    """The mask logits the decoder drafts from at every step (what it hands to `build_tree`) equal those of a plain
    causal forward of the accepted text (all history but the root) plus m masks, whose embedding is the prompt
    mean updated, independently here, with every token emitted up to the previous step (the embedding the previous
    verification forward hung). Fails for a decoder that reuses the prefill's mask logits, that reads the root's
    chain instead of the last accepted node's, or that hangs the never-updated prompt mean."""
    model, tok = tiny_loaded.model, tiny_loaded.tokenizer
    prompt = tok("seven dogs ran past 12 + 7 and 7 + 12 and seven dogs").input_ids
    dec = Recorder(model, tok, strategy="prompt_mean", alpha=0.3, masks_per_step=m, bc=30 if m == 1 else 60)
    out = dec.generate([prompt], 24, StopCriteria())[0]
    emb_layer = model.get_input_embeddings()
    table = emb_layer.weight.detach().float()
    e, folded = table[prompt].mean(0), len(prompt)  # the embedding of the masks the prefill forward carried
    checked = 0
    for rec in dec.log:
        h = rec["history"][0]
        if "probe" in rec:
            masks = (e * dec.scale).to(table.dtype)[None].expand(m, -1)
            x = torch.cat([emb_layer(torch.tensor(h[:-1])), masks])[None]
            with torch.no_grad():
                ref = model(inputs_embeds=x).logits[0, -m:]
            assert torch.allclose(rec["probe"][0], ref, atol=2e-4), (len(h), (rec["probe"][0] - ref).abs().max())
            checked += 1
        for t in h[folded:]:  # this step's chain hangs the prompt mean updated with every token emitted so far
            e = 0.7 * e + 0.3 * table[t]
        folded = len(h)
    drafted = sum(a > 1 for a in out.accepted[1:])
    assert checked >= 10 and drafted >= 1, (checked, out.accepted)  # steps after accepted drafts were checked too


def test_no_extra_forward_and_prefill_masks(tiny_llama):
    model, tok = tiny_llama.model, tiny_llama.tokenizer
    calls = []
    hook = model.register_forward_hook(lambda *a: calls.append(1))
    try:
        out = build_decoder("probing", model, tok, strategy="vocab_mean").generate(
            [tok("x y z 12").input_ids], 20, StopCriteria()
        )
    finally:
        hook.remove()
    assert len(calls) == out[0].forward_passes  # drafting costs no forward of its own


def early_stop_token(free) -> int:
    """A token ending row 0 after 6+ tokens and no other row before its 6th token (rows get pruned mid-batch)."""
    for t in free[0].tokens[6:]:
        if t not in free[0].tokens[:6] and all(t not in g.tokens[:6] for g in free[1:]):
            return t
    return free[0].tokens[-1]


MODES = [
    dict(bc=10),
    dict(bc=30, prune=False),
    dict(masks_per_step=2, bc=60),
    dict(masks_per_step=2, bc=30, expansion="top1"),
    dict(masks_per_step=2, bc=30, expansion="fixed", branching=[2, 3]),
    dict(bc=10, adaptive=True, min_obs=4, probe_every=3, calib_reps=1),
]
STRATS = [
    dict(strategy="prompt_mean", alpha=0.3),
    dict(strategy="last_n", n_last=2),
    dict(strategy="last_n", last_n_context=True),
    dict(strategy="gaussian", seed=1),
    dict(strategy="vocab_mean"),
]


@pytest.mark.parametrize("batch", [1, 3])
def test_lossless_every_strategy_and_tree(tiny_loaded, batch):
    tok, model = tiny_loaded.tokenizer, tiny_loaded.model
    prompts = _prompts(tok, 3, seed=batch)
    greedy = build_decoder("greedy", model, tok)
    free = greedy.generate(prompts, 20, StopCriteria())
    stop = StopCriteria(eos_ids=tiny_loaded.eos_ids + (early_stop_token(free),))  # a row stops early
    expect = [g.tokens for g in greedy.generate(prompts, 20, stop)]
    accepted_any = False
    for i, mode in enumerate(MODES):
        for strat in STRATS if batch == 3 else STRATS[i % len(STRATS) :][:1]:
            dec = Recorder(model, tok, **strat, **mode)
            out = dec.generate_all(prompts, 20, stop, batch_size=batch)
            assert [g.tokens for g in out] == expect, (strat, mode)
            rows = [r["rows"] for r in dec.log if "rows" in r]
            assert max(rows) <= mode["bc"], (strat, mode)
            m = mode.get("masks_per_step", 1)
            assert rows[0] == (1 + min(m, 19)) * (1 + m) or mode.get("adaptive")  # the prefill's Top-1 chain
            if "branching" not in mode and not mode.get("adaptive"):  # the dynamic budget is used exactly
                assert rows[1] == mode["bc"] - mode["bc"] % (1 + m)
            for g in out:
                assert g.accepted[0] == 1 and sum(g.accepted) >= len(g.tokens)
                assert len(g.extra["drafted"]) == g.forward_passes
            accepted_any |= any(a > 1 for g in out for a in g.accepted[1:])
    assert accepted_any


@pytest.mark.parametrize("mode", [dict(bc=10), dict(masks_per_step=2, bc=30, expansion="top1")])
def test_compiled_lossless(tiny_loaded, traced, mode):
    """`backend: compiled`: the mask rows ride in the compiled verification forward (and in the eager prefill on the
    static cache) as input embeddings; greedy's tokens in a left-padded batch with a row stopping early, with the
    drafts accepted where the eager decoder's are."""
    tok, model = tiny_loaded.tokenizer, tiny_loaded.model
    prompts = _prompts(tok, 3, seed=7)
    greedy = build_decoder("greedy", model, tok)
    stop = StopCriteria(eos_ids=tiny_loaded.eos_ids + (early_stop_token(greedy.generate(prompts, 20, StopCriteria())),))
    dec = build_decoder("probing", model, tok, backend="compiled", **mode)
    out = dec.generate(prompts, 20, stop)
    assert [g.tokens for g in out] == [g.tokens for g in greedy.generate(prompts, 20, stop)]
    eager = build_decoder("probing", model, tok, **mode).generate(prompts, 20, stop)
    assert [g.accepted for g in out] == [g.accepted for g in eager] and dec.compile_s > 0
    assert any(a > 1 for g in out for a in g.accepted)


def test_registered_and_validated(tiny_llama):
    model, tok = tiny_llama.model, tiny_llama.tokenizer
    assert decoders()["probing"] is ProbingDecoder and ProbingDecoder.lossless
    d = build_decoder("probing", model, tok)
    assert (d.strategy, d.m, d.bc, d.expansion, d.max_nodes, d.topk, d.prune) == (
        "prompt_mean",
        1,
        30,
        "dynamic",
        14,
        14,
        True,
    )
    assert build_decoder("probing", model, tok, masks_per_step=2, bc=30, expansion="top1").branching == (5, 4)
    assert build_decoder("probing", model, tok, masks_per_step=2, bc=30, expansion="fixed").branching == (3, 2)
    for bad, field in [
        (dict(strategy="mean"), "strategy"),
        (dict(masks_per_step=3), "masks_per_step"),
        (dict(expansion="beam"), "expansion"),
        (dict(expansion="fixed", masks_per_step=2, bc=30, branching=[3, 3]), "branching"),
        (dict(expansion="top1", branching=[2, 2]), "branching"),
        (dict(alpha=2.0), "alpha"),
        (dict(bc=1), "bc"),
    ]:
        with pytest.raises(ValueError, match=field):
            build_decoder("probing", model, tok, **bad)


# ---------------------------------------------------------------- wall-clock guard


def test_hit_stats_expected_tokens():
    s = HitStats(depth=2, ranks=3, prior=4.0, decay=1.0)
    for r in [0, 0, 1, 3]:  # 4 depth-1 observations: top-1 twice, rank 1 once, one miss
        s.observe(0, r)
    s.observe(1, 0)  # given a right top-1: depth 2 right once out of two
    s.observe(1, 2)
    # this batch (decay 1: its counts are all counts), shrunk towards the long run hits / (obs + 1) by 4
    q0 = [(2 + 4 * 2 / 5) / 8, (1 + 4 * 1 / 5) / 8, 0.0]
    q1 = (1 + 4 * 1 / 3) / 6
    v = s.slot_values()
    assert v[0].tolist() == pytest.approx(q0)
    assert v[1].tolist() == pytest.approx([q0[0] * q1, 0, q0[0] * q1])
    s.reset_local()  # a new batch: the long-run rates
    v = s.slot_values()
    assert v[0].tolist() == pytest.approx([2 / 5, 1 / 5, 0])
    assert v[1].tolist() == pytest.approx([2 / 5 * 1 / 3, 0, 2 / 5 * 1 / 3])
    assert s.expected_tokens()[:3].tolist() == pytest.approx([1, 1.4, 1.6])
    assert s.obs.tolist() == [4, 2]


def test_guard_decisions(tiny_llama):
    model, tok = tiny_llama.model, tiny_llama.tokenizer

    def guard(costs, hits):
        d = build_decoder("probing", model, tok, bc=10, adaptive=True, cost_table=costs, min_obs=10)
        for r in hits:
            d.stats.observe(0, r)
        return d._choose()

    good = [0] * 8 + [1] * 2 + [9] * 2  # top-1 right 2/3 of the time
    assert guard({1: 1.0, 64: 1.0}, good[:5])[0] == "explore"  # too few observations yet
    # flat cost (GPU-like): every slot that ever hit (ranks 0, 1); ranks never seen add nothing, so no more
    assert guard({1: 1.0, 64: 1.0}, good) == ("draft", 2)
    assert guard({1: 1.0, 4: 1.45, 10: 1.7}, [9] * 12)[0] == "greedy"  # CPU-like cost, nothing hits
    assert guard({1: 1.0, 4: 1.1, 10: 3.0}, good) == ("draft", 1)  # cheap 4-row chunk, costly 10 rows


def test_guard_falls_back_to_greedy_losslessly(tiny_llama):
    model, tok = tiny_llama.model, tiny_llama.tokenizer
    prompts = _prompts(tok, 2, seed=11)
    expect = [g.tokens for g in build_decoder("greedy", model, tok).generate(prompts, 24, StopCriteria())]
    dec = build_decoder(
        "probing",
        model,
        tok,
        strategy="vocab_mean",
        adaptive=True,
        min_obs=3,
        probe_every=5,
        cost_table={1: 1.0, 4: 50.0, 64: 60.0},
        online_cost=False,  # tiny models' real costs are flat
    )
    out = dec.generate_all(prompts, 24, StopCriteria())
    assert [g.tokens for g in out] == expect
    steps = dec.describe()["guard"]["steps"]
    assert steps["draft"] == 0 and steps["greedy"] > steps["probe"] > 0
    dec2 = build_decoder("probing", model, tok, bc=10, adaptive=True, calib_reps=1)
    dec2.generate(prompts[:1], 4, StopCriteria())
    cost = dec2.describe()["guard"]["cost"]["table"]
    assert cost[1] == 1.0 and set(cost) == {1, 4, 8, 10}  # measured on the cache: greedy step, N = 0/1, 3, 4


def _prompts(tok, n: int, seed: int) -> list[list[int]]:
    return random_prompts(tok, n, seed, words=(*PROMPT_WORDS, "----"))
