"""Paper 5's decoders: identical to reference greedy at temperature 0 (published and random trees, batch 1 and 2,
a row stopping early, `entmtp` switching trees every step), drafts placed where the heads put them (Medusa's
Cartesian candidates; Hydra's per-parent top-k, brute force, on trees that break the reference's prefix rule),
the stale signal, typical acceptance marked lossy, and clear errors."""

from __future__ import annotations

import random

import pytest
import torch

from mtp_core.decoding import StopCriteria, build_decoder
from mtp_core.decoding.tree import candidates_from_topk, published_tree, tree_buffers
from mtp_core.models.heads import load_heads
from mtp_core.models.heads.hydra import HydraHeads
from mtp_core.papers.p5 import decoders  # noqa: F401  (registration)
from mtp_core.papers.p5.drafting import HydraStep, MedusaStep
from tests.unit.papers.p5.p5_world import NEW_TOKENS, world
from tests.unit.papers.p5.test_p5_simulation import random_tree

BANK = {
    "trees": {
        "small": [[0]],
        "mid": [[0], [0, 0], [1]],
        "big": [[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0], [2]],
    },
    "best": "big",
    "conservative": "small",
    "aggressive": "big",
    "tau_on": 0.005,
    "tau_off": 0.002,
    "score_feature": "path_value_greedy_depth3",
}


def expected(prompts, stop):
    w = world()
    return [
        g.tokens
        for g in build_decoder("greedy", w.loaded.model, w.loaded.tokenizer).generate(prompts, NEW_TOKENS, stop)
    ]


@pytest.mark.parametrize(
    "name,params",
    [
        ("medusa", {"heads": "medusa", "tree": "mc_sim_7b_63"}),
        ("hydra", {"heads": "hydra", "tree": [[0], [0, 0], [0, 0, 0], [1], [1, 0], [2]]}),
        ("hydra", {"heads": "hydra_plain", "tree": [[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0], [0, 0, 1]]}),
        ("entmtp", {"heads": "hydra", "policy": "threshold_ladder", "thresholds": [0.002, 0.006]}),
        ("entmtp", {"heads": "medusa", "policy": "binary_tau", "signal": "stale"}),
        ("entmtp", {"heads": "hydra", "policy": "static"}),
    ],
)
def test_lossless_against_greedy(name, params):
    w = world()
    m, tok = w.loaded.model, w.loaded.tokenizer
    prompts = w.prompts[:6]
    free = expected(prompts, StopCriteria())
    stop = StopCriteria(eos_ids=(free[1][5],))  # row 1 (and maybe others) stops early: rows are pruned mid-batch
    want = expected(prompts, stop)
    params = {**params, "heads": w.heads[params["heads"]]}
    if name == "entmtp":
        params["bank"] = BANK
    dec = build_decoder(name, m, tok, **params)
    for batch in (1, 2):
        out = dec.generate_all(prompts, NEW_TOKENS, stop, batch_size=batch)
        assert [g.tokens for g in out] == want, (name, batch)
        for g in out:
            assert len(g.extra["trees"]) == g.forward_passes - 1
    if params.get("policy") == "threshold_ladder":  # the policy really switched between trees
        assert len({t for g in out for t in g.extra["trees"]}) == 3


def test_compiled_lossless_against_greedy(traced):
    """`backend: compiled`: the trunk's forwards on the static cache return the hidden states the heads read (Hydra's
    prefix layer reads the prompt's from the eager prefill there); the heads run compiled too, the prefix layer
    eager. Greedy's tokens in batches
    of 3 with a row stopping early, on Medusa's default tree (64 rows), a Hydra++ tree and EntMTP's ladder, with the
    drafts accepted where the eager decoder's are."""
    w = world()
    prompts = w.prompts[:6]
    stop = StopCriteria(eos_ids=(expected(prompts, StopCriteria())[1][5],))
    want = expected(prompts, stop)
    for name, params in (
        ("medusa", {"heads": "medusa", "tree": "mc_sim_7b_63"}),
        ("hydra", {"heads": "hydra", "tree": [[0], [0, 0], [0, 0, 0], [1], [1, 0], [2]]}),
        ("entmtp", {"heads": "hydra", "policy": "threshold_ladder", "thresholds": [0.002, 0.006], "bank": BANK}),
    ):
        params = {**params, "heads": w.heads[params["heads"]]}
        eager = build_decoder(name, w.loaded.model, w.loaded.tokenizer, **params)
        dec = build_decoder(name, w.loaded.model, w.loaded.tokenizer, **params, backend="compiled")
        out = dec.generate_all(prompts, NEW_TOKENS, stop, batch_size=3)
        assert [g.tokens for g in out] == want, name
        assert [g.accepted for g in out] == [g.accepted for g in eager.generate_all(prompts, NEW_TOKENS, stop, 3)]
        assert sum(a - 1 for g in out for a in g.accepted[1:]) > 0 and dec.compile_s > 0, name
        head = "hydra-head" if params["heads"] is w.heads["hydra"] else "medusa-head"
        assert any(key[2][0] == head for key in dec.static._shapes), name  # (function, cache shape, key)


def test_hydra_drafts_under_the_right_parent():
    """Every node's token is the top-k of head d-1 on its own parent's path, computed by brute force; the tree breaks
    both of the reference code's assumptions ((1,) has children while (0,) has none; ranks are not contiguous)."""
    w = world()
    m = w.loaded.model
    torch.manual_seed(0)  # random heads: every input block matters (trained identity-init heads barely read tokens)
    heads = HydraHeads.for_trunk(m, num_heads=3, init="hydra").bind(m)
    tree = [(0,), (2,), (2, 1), (2, 1, 0), (2, 3), (0, 2)]
    b = tree_buffers(tree)
    e, root = torch.randn(2, 64), torch.tensor([5, 9])
    cand = HydraStep(heads, e, root).propose(b)
    token_of = {(): root}
    for i, path in enumerate(b.paths):
        parent = token_of[path[:-1]]
        toks = torch.stack([token_of[path[:k]] for k in range(len(path))], dim=1)  # root .. parent
        logits = heads.head_logits(len(path) - 1, e, heads.embed(toks))
        want = logits.topk(path[-1] + 1, dim=-1).indices[:, path[-1]]
        assert torch.equal(cand[:, i], want), path
        token_of[path] = cand[:, i]
        assert parent.shape == (2,)


def test_medusa_candidates_are_the_cartesian_top_k():
    w = world()
    m = w.loaded.model
    heads = load_heads(w.heads["medusa"], m).bind(m)
    b = tree_buffers(published_tree("mc_sim_7b_63"))
    h = torch.randn(3, 64)
    ids = torch.stack([heads.head_logits(h, j).topk(10, dim=-1).indices for j in range(4)], dim=1)
    topk = heads.out.token_ids(ids)  # draft-vocabulary indices -> token ids
    assert heads.out.vocab_ids is not None and not torch.equal(topk, ids)
    assert torch.equal(MedusaStep(heads, h).propose(b), candidates_from_topk(topk, b))
    with pytest.raises(ValueError, match="depth 5 needs 5 Medusa heads"):
        MedusaStep(heads, h).propose(tree_buffers([(0,) * d for d in range(1, 6)]))


def test_stale_signal_reads_the_previous_proposal():
    """The public code's stale signal: no head probabilities at the first step, and after a step in the depth-1
    tree none of depth 2, so the depth-2 path value falls back to p0 at every step; the fresh one multiplies p0
    by the heads' chain probabilities of the current step."""
    w = world()
    m, tok = w.loaded.model, w.loaded.tokenizer
    kw = {
        "heads": w.heads["hydra"],
        "bank": BANK,
        "score_feature": "path_value_greedy_depth2",
        "tau_on": 0.999,
        "tau_off": 0.999,
    }  # above every score here, so it never leaves the conservative depth-1 tree (τ >= 1 would read no score)
    (g,) = build_decoder("entmtp", m, tok, signal="stale", **kw).generate(w.prompts[:1], NEW_TOKENS, StopCriteria())
    (f,) = build_decoder("entmtp", m, tok, **kw).generate(w.prompts[:1], NEW_TOKENS, StopCriteria())
    assert g.tokens == f.tokens and set(g.extra["trees"]) == {"small"}
    seq = torch.tensor([w.prompts[0] + g.tokens])
    probs = torch.softmax(m(input_ids=seq).logits[0].float(), -1).max(-1).values
    emitted = torch.tensor(g.accepted).cumsum(0)[:-1]  # tokens out before each step: its root is the last one
    p0 = probs[len(w.prompts[0]) - 2 + emitted]  # the position whose output was that root
    assert g.extra["scores"] == pytest.approx(p0.tolist(), rel=1e-4)
    assert all(fs < gs for fs, gs in zip(f.extra["scores"], g.extra["scores"])) and max(g.extra["scores"]) < 0.999


def test_typical_acceptance_is_lossy_and_errors_name_the_problem():
    w = world()
    m, tok = w.loaded.model, w.loaded.tokenizer
    dec = build_decoder(
        "hydra", m, tok, heads=w.heads["hydra"], tree=[[0], [0, 0]], acceptance="typical", temperature=0.7
    )
    assert not dec.lossless and dec.describe()["lossless"] is False
    out = dec.generate(w.prompts[:2], NEW_TOKENS, StopCriteria())
    assert all(len(g.tokens) == NEW_TOKENS for g in out)
    with pytest.raises(ValueError, match="heads of arch 'medusa', expected hydra"):
        build_decoder("hydra", m, tok, heads=w.heads["medusa"])
    with pytest.raises(ValueError, match="depth 4, the heads predict 3"):
        build_decoder("hydra", m, tok, heads=w.heads["hydra"], tree="mc_sim_7b_63")
    with pytest.raises(ValueError, match="`heads`"):
        build_decoder("medusa", m, tok)
    with pytest.raises(ValueError, match="tau_off"):
        build_decoder("entmtp", m, tok, heads=w.heads["hydra"], bank=BANK, tau_on=0.1, tau_off=0.2)


def test_prefix_cache_follows_pruned_rows():
    """Batch 3 with rows stopping at different steps: the prefix layer's cache stays aligned with the trunk's."""
    w = world()
    m, tok = w.loaded.model, w.loaded.tokenizer
    prompts = w.prompts[6:9]
    free = expected(prompts, StopCriteria())
    stop = StopCriteria(eos_ids=(free[0][3], free[2][9]))
    dec = build_decoder("hydra", m, tok, heads=w.heads["hydra"], tree=random_tree(random.Random(1), 7))
    assert [g.tokens for g in dec.generate(prompts, NEW_TOKENS, stop)] == expected(prompts, stop)
