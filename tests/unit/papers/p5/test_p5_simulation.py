"""The exact offline simulation at temperature 0 against the real decoders: per-step accept counts and
forwards of random trees (Medusa, Hydra++, plain Hydra; batch 1 and 2), the debiased value of a tree = its own
decode, and the scheduler's simulated tree choices = the `entmtp` decoder's."""

from __future__ import annotations

import random

import numpy as np
import pytest

from mtp_core.decoding import StopCriteria, build_decoder
from mtp_core.models.heads import load_heads
from mtp_core.papers.p5 import decoders  # noqa: F401  (registration)
from mtp_core.papers.p5.bank import ROOT_ONLY, canonical, tree_depth
from mtp_core.papers.p5.capture import build_table, greedy_trajectories
from mtp_core.papers.p5.engines import OfflineEngine
from mtp_core.papers.p5.frontier import States, debias, simulate, simulated_value
from mtp_core.papers.p5.scheduler import Policy, score
from mtp_core.papers.p5.settings import FrontierSettings
from mtp_core.papers.p5.stages import task_frontier
from mtp_core.papers.p5.throughput import StepPrices
from tests.unit.papers.p5.p5_world import NEW_TOKENS, world


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
        row = debias({"per_depth_history": {}}, "global", {"t": canonical(tree)}, simulated_value(table))[0]
        real_all = np.concatenate(
            [np.minimum(np.array(g.accepted[1:]) - 1, states.cap[s]) for g, s in zip(out, roll.steps)]
        )
        assert row["self"] == pytest.approx(real_all.mean())
    assert accepted_any > 20  # the trees were exercised, not only rejected


@pytest.mark.parametrize(
    "policy,small",
    [("threshold_ladder", [(0,)]), ("binary_tau", [(0,)]), ("binary_tau", [])],
    ids=["ladder", "tau", "tau-root-only"],
)
def test_scheduler_simulation_equals_entmtp_choices(policy, small):
    """`small` []: S is the root-only tree (`include_greedy`): its steps draft nothing and emit one token."""
    w = world()
    m, tok = w.loaded.model, w.loaded.tokenizer
    table = table_of("hydra")
    bank = {
        "s": canonical(small),
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
    order = sorted(bank, key=lambda i: (len(bank[i]), tree_depth(bank[i]), i))
    sim = OfflineEngine(table, 10).run(bank, Policy(policy, order, **kw), feature)
    assert 0.1 < max(sim.share(order).values()) < 0.9  # the policy really switches
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
    assert [g.extra["trees"] for g in out] == sim.trees
    if not small:
        steps = [(t, a) for g in out for t, a in zip(g.extra["trees"], g.accepted[1:])]
        assert {a for t, a in steps if t == "s"} == {1} and any(t == "b" and a > 1 for t, a in steps)


@pytest.mark.parametrize("dear", [False, True], ids=["cheap-rows", "dear-rows"])
def test_root_only_tree_in_the_frontier(dear, monkeypatch):
    """`include_greedy`: the root-only tree heads the hull and is S; it is EntMTP* exactly when every searched
    tree prices slower (verification of 2+ rows made 100x a one-row step), and the `entmtp` decoder then decodes
    one token per forward, identical to greedy, without calling the heads or the prefix layer."""
    w = world()
    m, tok = w.loaded.model, w.loaded.tokenizer
    heads = load_heads(w.heads["hydra"], m).bind(m)
    table = table_of("hydra")
    prices = StepPrices(verify_rows=[1, 4, 64], verify_seconds=[1.0, 100.0 if dear else 1.0, 100.0 if dear else 1.0])
    settings = FrontierSettings(
        depths=(1, 2),
        budgets=(2, 4),
        score_feature="path_value_greedy_depth2",
        taus=(0.01, 0.5),
        hysteresis=(1.0,),
        price_reps=1,
        include_greedy=True,
    )
    out = task_frontier(OfflineEngine(table, 10), table, w.prompts, prices, w.loaded, heads, settings)
    thr, bank = out["throughput"], out["bank"]
    # Table 2's statistics over every re-scored tree, by brute force: max |self - biased| and Kendall's tau-a
    rs = [r for r in out["self"]["rows"] if r["biased"] is not None]
    assert out["self"]["max_abs_delta"] == pytest.approx(max(abs(r["self"] - r["biased"]) for r in rs))
    pairs = [(a, b) for i, a in enumerate(rs) for b in rs[i + 1 :]]
    concordance = [np.sign(a["biased"] - b["biased"]) * np.sign(a["self"] - b["self"]) for a, b in pairs]
    assert out["self"]["kendall_tau"] == pytest.approx(sum(concordance) / len(pairs)) and len(rs) > 3
    assert out["self"]["frontier_mode"] == "per-depth" and {r["depth"] for r in rs} == {1, 2}
    # the bank's τ and ladder are the sweeps' fastest settings (each sweep ordered by modeled tok/s)
    for sweep in (out["throughput"]["tau_sweep"], out["throughput"]["ladder_sweep"]):
        speeds = [r["modeled_tokens_per_s"] for r in sweep]
        assert speeds == sorted(speeds, reverse=True) and len(sweep) > 1
    best_tau = out["throughput"]["tau_sweep"][0]
    assert (out["bank"]["tau_on"], out["bank"]["tau_off"]) == (best_tau["tau_on"], best_tau["tau_off"])
    assert out["bank"]["thresholds"] == out["throughput"]["ladder_sweep"][0]["thresholds"]
    rows = {r["id"]: r for r in thr["rows"]}
    assert rows[ROOT_ONLY]["n_nodes"] == 0 and rows[ROOT_ONLY]["mean_accept"] == 0
    assert thr["hull"][0] == ROOT_ONLY and bank["conservative"] == ROOT_ONLY
    searched = [r for r in thr["rows"] if r["id"] != ROOT_ONLY]
    fastest = max(searched, key=lambda r: r["modeled_tokens_per_s"])
    assert bank["aggressive"] == fastest["id"] and bank["aggressive"] in bank["trees"]
    if dear:
        assert fastest["modeled_tokens_per_s"] < rows[ROOT_ONLY]["modeled_tokens_per_s"]
        assert bank["best"] == ROOT_ONLY and thr["hull"] == [ROOT_ONLY]
    else:
        assert fastest["modeled_tokens_per_s"] > rows[ROOT_ONLY]["modeled_tokens_per_s"]
        assert bank["best"] == fastest["id"] and ROOT_ONLY in bank["order"]
    dec = build_decoder("entmtp", m, tok, heads=w.heads["hydra"], bank=bank, policy="static")
    calls = []
    for name in ("prefix_forward", "head_logits"):
        fn = getattr(dec.heads, name)
        monkeypatch.setattr(dec.heads, name, lambda *a, _fn=fn, _name=name, **k: calls.append(_name) or _fn(*a, **k))
    got = dec.generate_all(w.prompts, NEW_TOKENS, StopCriteria(), batch_size=2)
    assert (not calls) == dear and dec.drafting == (not dear)
    never = build_decoder("entmtp", m, tok, heads=w.heads["hydra"], bank=bank, policy="binary_tau", tau=1.0)
    calls.clear()  # EntMTPτ at τ 1 stays on S, the root-only tree: greedy steps, no head or prefix calls
    assert [g.tokens for g in never.generate_all(w.prompts, NEW_TOKENS, StopCriteria())] == [g.tokens for g in got]
    assert never.heads is dec.heads and not calls and not never.drafting
    expect = build_decoder("greedy", m, tok).generate(w.prompts, NEW_TOKENS, StopCriteria())
    assert [g.tokens for g in got] == [g.tokens for g in expect]
    if dear:
        assert all(g.forward_passes == len(g.tokens) for g in got)


def test_decoding_job_checks_the_simulation_only_at_temperature_zero(tmp_path):
    """The decoding job's simulation check: a heads method with greedy acceptance is predicted step for step; one
    with typical acceptance (the paper's T 0.7) is not checked (None, with the reason), and the job is not
    flagged as unequal for it."""
    import json

    from mtp_core.papers.p5.jobs import decode_job

    w = world()
    tok = w.loaded.tokenizer
    rows = [{"id": f"r{i}", "category": "toy", "prompt": tok.decode(p)} for i, p in enumerate(w.prompts[:2])]
    methods = {
        "greedy": {},
        "hydra_greedy": {"decoder": "hydra", "heads": str(w.heads["hydra"]), "tree": [[0], [0, 0], [1]]},
        "hydra_typical": {
            "decoder": "hydra",
            "heads": str(w.heads["hydra"]),
            "tree": [[0], [0, 0]],
            "acceptance": "typical",
            "temperature": 0.7,
        },
    }
    outputs = [str(tmp_path / f"{k}.json") for k in methods]
    check = tmp_path / "check.json"
    decode_job(
        w.loaded, rows, methods, outputs, str(check), prompt_set="toy", scale="tiny", config_hash="x",
        max_new_tokens=NEW_TOKENS, batch_size=1, threads=1, warmup=0, repeats=1,
    )  # fmt: skip
    got = json.loads(check.read_text())
    assert got["methods"]["hydra_greedy"]["equal"] is True and got["all_equal"] is True
    assert got["methods"]["hydra_typical"]["equal"] is None and "typical" in got["methods"]["hydra_typical"]["why"]
