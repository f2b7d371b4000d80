"""The rollout engine (the paper's, for T > 0): at temperature 0 it equals the exact offline engine, one search
iteration and the whole frontier pipeline (search, self values, throughput rows, bank, τ and ladder sweeps); at
T 0.7 with typical acceptance every candidate's what-if accept equals a brute-force decode of T u {f} from each
state of T's trajectory; its bank records the regime, which the `entmtp` decoder holds it to."""

from __future__ import annotations

import copy
import json

import pytest

from mtp_core.decoding import StopCriteria, build_decoder
from mtp_core.models.heads import load_heads
from mtp_core.papers.p5 import stages
from mtp_core.papers.p5.bank import canonical
from mtp_core.papers.p5.capture import build_table, greedy_trajectories
from mtp_core.papers.p5.engines import OfflineEngine, static_policy
from mtp_core.papers.p5.frontier import States, frontier_nodes, greedy_search, what_if
from mtp_core.papers.p5.rollout import RolloutEngine, rollout_search, union_iteration
from mtp_core.papers.p5.settings import FrontierSettings
from mtp_core.papers.p5.stages import task_frontier
from mtp_core.papers.p5.throughput import StepPrices
from tests.unit.papers.p5.p5_world import NEW_TOKENS, world
from tests.unit.papers.p5.test_p5_simulation import table_of

TYPICAL = {"acceptance": "typical", "temperature": 0.7, "posterior_threshold": 0.09, "posterior_alpha": 0.3}


class Loaded:
    """The world's model with no stop ids (the offline tables run the full budget)."""

    def __init__(self, loaded):
        self.model, self.tokenizer = loaded.model, loaded.tokenizer

    def stop_criteria(self):
        return StopCriteria()


def hydra():
    w = world()
    return Loaded(w.loaded), load_heads(w.heads["hydra"], w.loaded.model).bind(w.loaded.model)


def test_union_rollout_equals_offline_at_temperature_zero():
    w = world()
    loaded, heads = hydra()
    table = table_of("hydra")
    states = States.of(table, 3)
    tree = canonical([(0,), (0, 0), (1,)])
    cands = frontier_nodes(set(tree), 3, 10)
    offline_own, offline = what_if(states, tree, cands)
    own, means, steps = union_iteration(loaded, heads, w.prompts, tree, cands, NEW_TOKENS, batch_size=2)
    assert steps == offline_own.n_steps
    assert own == pytest.approx(offline_own.mean_accept)
    assert means == pytest.approx(offline)
    engine = RolloutEngine(loaded, heads, w.prompts, NEW_TOKENS)
    assert engine.run({"t": tree}, static_policy("t"), "base_top1_prob").mean_accept == pytest.approx(
        OfflineEngine(table, 10).run({"t": tree}, static_policy("t"), "base_top1_prob").mean_accept
    )
    (row,) = rollout_search(loaded, heads, w.prompts, 2, stop_at=2, max_new_tokens=NEW_TOKENS)
    (want,) = greedy_search(States.of(table, 2), 2, stop_at=2)
    assert row["added_node"] == want["added_node"] and row["mean_accept"] == pytest.approx(want["mean_accept"])


def test_typical_what_if_equals_brute_force_decodes_of_each_candidate_tree():
    """At T 0.7 (typical acceptance) the union rollout credits candidate f at each step of T's trajectory with
    what T u {f} would accept there; brute force: decode T alone, and from every state of its trajectory decode
    one step of the tree T u {f} on its own (a fresh decoder, its own drafts and verification), capped like the
    engine's what-if (the bonus token within the budget)."""
    w = world()
    loaded, heads = hydra()
    prompts = w.prompts[:4]
    tree, cands = ((0,),), [(1,), (0, 0)]
    own, means, steps = union_iteration(loaded, heads, prompts, tree, cands, NEW_TOKENS, **TYPICAL)
    m, tok = w.loaded.model, w.loaded.tokenizer
    alone = build_decoder("hydra", m, tok, heads=heads, tree=[[0]], **TYPICAL)
    trajectories = alone.generate_all(prompts, NEW_TOKENS, StopCriteria())
    own_sum, credited = 0, []
    for f in cands:
        dec = build_decoder("hydra", m, tok, heads=heads, tree=[list(p) for p in canonical([*tree, f])], **TYPICAL)
        total, n = 0, 0
        for p, g in zip(prompts, trajectories):
            emitted = g.accepted[0]
            for a in g.accepted[1:]:  # the state before each step: `emitted` tokens out, the last one its root
                left = NEW_TOKENS - emitted
                (h,) = dec.generate([p + g.tokens[: emitted - 1]], 1 + left, StopCriteria())
                assert h.tokens[0] == g.tokens[emitted - 1]  # the same root
                total += min(h.accepted[1] - 1, left - 1)
                if f == cands[0]:
                    own_sum += min(a - 1, left - 1)
                n += 1
                emitted += a
        credited.append(total / n)
        assert n == steps
    assert own == pytest.approx(own_sum / steps)
    assert means == pytest.approx(credited)
    assert credited[1] > own  # (0, 0) is accepted at some states: the comparison is not vacuous


def _fixed_prices(monkeypatch):
    """Deterministic drafting and prefill prices (timed ones differ between two calls)."""

    def drafting(prices, model, heads, prompt, trees, chain_depth, reps=5):
        prices.chain, prices.chain_depth = 0.02, chain_depth
        prices.advance = {m: 0.001 * m for m in range(1, 6)}
        for tid, paths in trees.items():
            prices.draft[tid] = 0.01 + 0.002 * len(paths)
            prices.draft_after_chain[tid] = 0.005 + 0.002 * len(paths)

    monkeypatch.setattr(stages, "measure_drafting", drafting)
    monkeypatch.setattr(stages, "measure_prefill", lambda model, prompts: [0.5] * len(prompts))
    return StepPrices([1, 4, 8, 16, 32, 64], [0.1, 0.13, 0.16, 0.22, 0.35, 0.6])


def test_rollout_pipeline_equals_offline_at_temperature_zero(monkeypatch):
    w = world()
    loaded, heads = hydra()
    prompts = w.prompts[:6]
    trajs = greedy_trajectories(w.loaded.model, w.loaded.tokenizer, prompts, NEW_TOKENS, StopCriteria(), 3)
    table = build_table(heads, trajs, w.loaded.model.get_output_embeddings(), [str(i) for i in range(6)])
    prices = _fixed_prices(monkeypatch)
    settings = FrontierSettings(
        depths=(1, 2), budgets=(2, 4), score_feature="path_value_greedy_depth2", taus=(0.01, 0.1), price_reps=1
    )
    common = (table, prompts, w.loaded, heads, settings)
    off = task_frontier(OfflineEngine(table, 10), table, prompts, copy.deepcopy(prices), *common[2:])
    roll = task_frontier(
        RolloutEngine(loaded, heads, prompts, NEW_TOKENS, batch_size=3), *common[:2], prices, *common[2:]
    )
    for d in ("1", "2"):
        a, b = off["search"]["per_depth_history"][d], roll["search"]["per_depth_history"][d]
        assert [r["added_node"] for r in a] == [r["added_node"] for r in b] and len(a) == 4
        assert [r["mean_accept"] for r in a] == pytest.approx([r["mean_accept"] for r in b])
    assert [(r["id"], r["self"]) for r in off["self"]["rows"]] == [
        (r["id"], pytest.approx(r["self"])) for r in roll["self"]["rows"]
    ]
    keys = ("id", "mean_accept", "modeled_tokens_per_s", "forwards")
    assert [[r[k] for k in keys] for r in off["throughput"]["rows"]] == [
        [pytest.approx(r[k]) if k != "id" else r[k] for k in keys] for r in roll["throughput"]["rows"]
    ]
    assert all("measured_tokens_per_s" in r for r in roll["throughput"]["rows"])  # the rollouts' wall clock
    same = ("order", "best", "conservative", "aggressive", "tau_on", "tau_off", "thresholds")
    assert {k: off["bank"][k] for k in same} == {k: roll["bank"][k] for k in same}
    assert (off["bank"]["engine"], roll["bank"]["engine"]) == ("offline", "rollout")
    sweep = [(r["tau_on"], r["tau_off"], r["modeled_tokens_per_s"]) for r in roll["throughput"]["tau_sweep"]]
    assert [
        (r["tau_on"], r["tau_off"], pytest.approx(r["modeled_tokens_per_s"])) for r in off["throughput"]["tau_sweep"]
    ] == sweep
    assert len(sweep) == 2 * 2 + 2  # 2 τ x 2 hysteresis factors and the two static ends


def test_rollout_frontier_job_at_typical_acceptance_writes_a_bank_for_its_regime(tmp_path, monkeypatch):
    """The frontier job on the rollout engine at T 0.7: its bank loads in an `entmtp` decoder of the same regime,
    which decodes; a decoder at another regime (greedy, another temperature) refuses it."""
    from mtp_core.io import atomic_write_jsonl
    from mtp_core.papers.p5.jobs import frontier_job

    w = world()
    calib = tmp_path / "calib.jsonl"
    tok = w.loaded.tokenizer
    atomic_write_jsonl(calib, [{"id": f"c{i}", "prompt": tok.decode(p)} for i, p in enumerate(w.prompts[:3])])
    settings = FrontierSettings(
        depths=(1, 2),
        budgets=(2,),
        score_feature="path_value_greedy_depth2",
        taus=(0.05,),
        hysteresis=(1.0,),
        price_reps=1,
    )
    monkeypatch.setattr(w.loaded, "chat_template", False)
    job = {
        "calibration": {"max_new_tokens": 8, "batch_size": 3},
        "max_rows": 8,
        "engine": "rollout",
        "decode": TYPICAL,
    }
    frontier_job(w.loaded, str(w.heads["hydra"]), str(calib), str(tmp_path / "out"), settings, job, {"task": "toy"})
    bank = json.loads((tmp_path / "out/bank.json").read_text())
    assert bank["engine"] == "rollout" and bank["regime"] == TYPICAL and bank["best"] in bank["trees"]
    search = json.loads((tmp_path / "out/search.json").read_text())
    assert search["settings"]["engine"] == "rollout" and search["per_depth_history"]["2"]
    m = w.loaded.model
    for policy in ("static", "binary_tau", "threshold_ladder"):
        dec = build_decoder(
            "entmtp", m, tok, heads=w.heads["hydra"], bank=str(tmp_path / "out/bank.json"), policy=policy, **TYPICAL
        )
        assert not dec.lossless and dec.generate(w.prompts[:1], 6, StopCriteria())[0].tokens
    with pytest.raises(ValueError, match="chosen under"):
        build_decoder("entmtp", m, tok, heads=w.heads["hydra"], bank=str(tmp_path / "out/bank.json"))
    with pytest.raises(ValueError, match="chosen under"):
        build_decoder("entmtp", m, tok, heads=w.heads["hydra"], bank=bank, **{**TYPICAL, "temperature": 1.0})
    with pytest.raises(ValueError, match="exact at temperature 0 only"):
        frontier_job(
            w.loaded,
            str(w.heads["hydra"]),
            str(calib),
            str(tmp_path / "o2"),
            settings,
            {**job, "engine": "offline"},
            {},
        )
