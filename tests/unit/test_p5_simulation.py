"""The exact offline simulation at temperature 0 (spec §4.2) against the real decoders: per-step accept counts and
forwards of random trees (Medusa, Hydra++, plain Hydra; batch 1 and 2), the debiased value of a tree = its own
decode, and the scheduler's simulated tree choices = the `entmtp` decoder's."""

from __future__ import annotations

import random

import numpy as np
import pytest

from mtp_core.decoding import StopCriteria, build_decoder
from mtp_core.heads import load_heads
from mtp_core.papers.p5 import decoders  # noqa: F401  (registration)
from mtp_core.papers.p5.bank import canonical
from mtp_core.papers.p5.calibration import build_table
from mtp_core.papers.p5.capture import greedy_trajectories
from mtp_core.papers.p5.frontier import States, debias, simulate
from mtp_core.papers.p5.scheduler import Policy, score
from mtp_core.papers.p5.throughput import policy_rollout

from .p5_world import NEW_TOKENS, world


def random_tree(rng: random.Random, n_nodes: int, max_depth: int = 3, max_rank: int = 4) -> list[tuple[int, ...]]:
    """A valid tree of random shape: ranks need not be contiguous, children with descendants need not come first
    (the cases Hydra's reference code drafts under the wrong parent)."""
    tree: set[tuple[int, ...]] = set()
    while len(tree) < n_nodes:
        parent = rng.choice([(), *[p for p in tree if len(p) < max_depth]])
        free = [r for r in range(max_rank) if (*parent, r) not in tree]
        if free:
            tree.add((*parent, rng.choice(free)))
    return sorted(tree, key=lambda p: (len(p), p))


def table_of(name: str):
    w = world()
    m, tok = w.loaded.model, w.loaded.tokenizer
    heads = load_heads(w.heads[name], m).bind(m)
    trajs = greedy_trajectories(m, tok, w.prompts, NEW_TOKENS, StopCriteria(), batch_size=4)
    return build_table(heads, trajs, m.get_output_embeddings(), [str(i) for i in range(len(trajs))])


@pytest.mark.parametrize("name", ["medusa", "hydra", "hydra_plain"])
def test_simulation_equals_decoder_step_counts(name):
    w = world()
    m, tok = w.loaded.model, w.loaded.tokenizer
    table = table_of(name)
    states = States.of(table)
    arch = "medusa" if name == "medusa" else "hydra"
    rng = random.Random(hash(name) % 1000)
    expect_tokens = [g.tokens for g in build_decoder("greedy", m, tok).generate(w.prompts, NEW_TOKENS, StopCriteria())]
    accepted_any = 0
    for k in range(3):
        tree = random_tree(rng, rng.randint(2, 9))
        roll = simulate(states, tree)
        dec = build_decoder(arch, m, tok, heads=w.heads[name], tree=[list(p) for p in tree])
        for batch in (1, 3) if k == 0 else (3,):
            out = dec.generate_all(w.prompts, NEW_TOKENS, StopCriteria(), batch_size=batch)
            assert [g.tokens for g in out] == expect_tokens
            for p, g in enumerate(out):
                real = np.array(g.accepted[1:]) - 1
                cap = states.cap[roll.steps[p]]
                assert g.forward_passes == 1 + len(roll.steps[p]), (tree, p)
                assert np.minimum(real, cap).tolist() == roll.accepts[p].tolist(), (tree, p)
                accepted_any += int(real.sum())
        # the debiased ("self") value of the tree is its own decode's mean accept
        row = debias(table, {"per_depth_history": {}}, "global", {"t": canonical(tree)})[0]
        real_all = np.concatenate(
            [np.minimum(np.array(g.accepted[1:]) - 1, states.cap[s]) for g, s in zip(out, roll.steps)]
        )
        assert row["self"] == pytest.approx(real_all.mean())
    assert accepted_any > 20  # the trees were exercised, not only rejected


@pytest.mark.parametrize("policy", ["threshold_ladder", "binary_tau"])
def test_scheduler_simulation_equals_entmtp_choices(policy):
    w = world()
    m, tok = w.loaded.model, w.loaded.tokenizer
    table = table_of("hydra")
    bank = {
        "s": canonical([(0,)]),
        "m": canonical([(0,), (0, 0), (1,)]),
        "b": canonical(random_tree(random.Random(3), 8)),
    }
    feature = "path_value_greedy_depth2"
    values = np.concatenate([score(feature, t.p0, t.chain[:, :2]) for t in table])
    if policy == "threshold_ladder":
        kw = {"thresholds": [float(np.quantile(values, 0.3)), float(np.quantile(values, 0.7))]}
    else:
        kw = {"conservative": "s", "aggressive": "b", "tau_on": float(np.quantile(values, 0.6))}
        kw["tau_off"] = float(np.quantile(values, 0.3))
    order = sorted(bank, key=lambda i: (len(bank[i]), max(map(len, bank[i])), i))
    sim = policy_rollout(table, States.of(table), bank, Policy(policy, order, **kw), feature)
    assert 0.1 < max(sim["share"].values()) < 0.9  # the policy really switches
    dec = build_decoder(
        "entmtp",
        m,
        tok,
        heads=w.heads["hydra"],
        bank={"trees": {i: [list(p) for p in t] for i, t in bank.items()}},
        policy=policy,
        score_feature=feature,
        **kw,
    )
    out = dec.generate_all(w.prompts, NEW_TOKENS, StopCriteria(), batch_size=1)
    expect = build_decoder("greedy", m, tok).generate(w.prompts, NEW_TOKENS, StopCriteria())
    assert [g.tokens for g in out] == [g.tokens for g in expect]
    assert [g.extra["trees"] for g in out] == sim["trees"]
