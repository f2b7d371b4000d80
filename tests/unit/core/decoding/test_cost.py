"""The shared wall-clock guard: the cost model (interpolation, online correction), per-depth acceptance estimates
by hand, the choose / greedy / probe decisions on synthetic cost tables, calibration once per batch size, the
path drafters' depth caps, and a losslessly falling-back guard in every drafting decoder."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from mtp_core.decoding import GenerationResult, StopCriteria, build_decoder
from mtp_core.decoding import cost as cost_module
from mtp_core.decoding.cost import (
    DepthAcceptance,
    WallClockGuard,
    calibrate_on_prompt,
    calibration_rows,
    padded_rows,
    timed_call,
)
from mtp_core.decoding.ngram import union_tree
from mtp_core.decoding.pricing import CostModel, generation_steps, layer_forward_steps, modeled_steps


def test_timed_call_waits_for_the_device(monkeypatch):
    """On CUDA the queued work is finished before the clock starts and the call's own before it stops."""
    events = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: events.append("sync"))
    assert timed_call(lambda: events.append("call"), "cuda:0") >= 0 and events == ["sync", "call", "sync"]
    events.clear()
    assert timed_call(lambda: time.sleep(0.01), "cpu") >= 0.01 and events == []


def test_cost_model():
    c = CostModel({1: 0.1, 4: 0.15, 30: 0.3})
    assert [c(1), c(4), c(17), c(64)] == pytest.approx([1.0, 1.5, 2.25, 3.0])
    with pytest.raises(ValueError):
        CostModel({4: 1.0})
    # observed step times replace the table's ratio once both sizes have min_count observations
    for _ in range(3):
        c.observe(1, 0.2)
        c.observe(4, 0.5)
    assert c(4) == pytest.approx(2.5) and c(30) == pytest.approx(3.0) and c.one_row_seconds() == 0.2
    c.observe(4, 1.5)
    assert c(4) == pytest.approx((0.5 + 0.1 * 1.0) / 0.2)
    frozen = CostModel({1: 1.0, 4: 2.0}, online=False)
    for _ in range(5):
        frozen.observe(4, 9.0)
        frozen.observe(1, 1.0)
    assert frozen(4) == 2.0


def test_rows_helpers():
    assert [padded_rows(r, True) for r in (1, 2, 3, 4)] == [1, 4, 4, 4] and padded_rows(3, False) == 3
    assert calibration_rows(4) == [1, 4] and calibration_rows(30) == [1, 4, 8, 16, 30]
    assert calibration_rows(64) == [1, 4, 8, 16, 32, 64] and calibration_rows(1) == [1]


def test_depth_acceptance_by_hand():
    a = DepthAcceptance(3, prior=4.0, decay=0.9)
    # row drafted 3 and accepted 1: depths 1, 2 tried, depth 1 hit; row drafted 1, accepted 1: depth 1 tried+hit;
    # row drafted 2 and accepted 0: depth 1 tried
    a.observe(np.array([3, 1, 2]), np.array([1, 1, 0]))
    assert a.tries.tolist() == [3, 1, 0] and a.hits.tolist() == [2, 0, 0]
    # long run: hits / (tries + 1) = [1/2, 0, 0]; this batch: (hits + 4 * long run) / (tries + 4)
    p1 = (2 + 4 * 0.5) / (3 + 4)
    assert a.expected_tokens().tolist() == pytest.approx([1, 1 + p1, 1 + p1, 1 + p1])
    a.observe(np.array([3]), np.array([3]))
    # long run [3/5, 1/3, 1/2]; batch counts decayed by 0.9 then added: tries [3.7, 1.9, 1], hits [2.8, 1, 1]
    p1, p2, p3 = (2.8 + 4 * 3 / 5) / 7.7, (1 + 4 / 3) / 5.9, (1 + 4 / 2) / 5
    assert a.expected_tokens().tolist() == pytest.approx([1, 1 + p1, 1 + p1 + p1 * p2, 1 + p1 + p1 * p2 + p1 * p2 * p3])
    a.reset_local()  # a new batch starts from the long-run rates
    p1, p2, p3 = 3 / 5, 1 / 3, 1 / 2
    assert a.expected_tokens().tolist() == pytest.approx([1, 1 + p1, 1 + p1 + p1 * p2, 1 + p1 + p1 * p2 + p1 * p2 * p3])
    with pytest.raises(ValueError, match="local_prior"):
        DepthAcceptance(3, prior=0.0)


def test_batch_estimates_follow_the_batch():
    """One accepted probe raises a low long-run rate enough to draft; one rejection takes it back below."""
    a = DepthAcceptance(3)
    for i in range(20):  # long run: depth 1 accepted 3 times in 20
        a.observe(np.array([1]), np.array([int(i % 7 == 0)]))
    a.reset_local()
    g = guard({1: 1.0, 4: 1.45})
    rows = {0: 1, 1: 4, 2: 4, 3: 4}
    choose = lambda: g.choose(dict(enumerate(a.expected_tokens().tolist())), rows)[0]  # noqa: E731
    assert choose() == "greedy"  # 1 + 3/21 tokens for 1.45 steps
    a.observe(np.array([3]), np.array([3]))  # a probe accepted whole: p = 0.35, 0.6, 0.6 -> 1.68 tokens
    assert choose() == "draft"
    a.observe(np.array([3]), np.array([0]))  # two rejections: p1 = 0.22 -> 1.42 tokens
    a.observe(np.array([3]), np.array([0]))
    assert choose() == "greedy"


def guard(table, **kw) -> WallClockGuard:
    return WallClockGuard({"adaptive": True, "cost_table": table, **kw})


def test_guard_choices_on_synthetic_tables():
    e = {0: 1.0, 1: 1.6, 2: 1.9, 3: 2.0}
    rows = {0: 1, 1: 4, 2: 8, 3: 12}
    # GPU-like flat cost: the largest expected gain; ties go to the smaller option
    assert guard({1: 1.0, 64: 1.0}).choose(e, rows) == ("draft", 3)
    assert guard({1: 1.0, 64: 1.0}).choose({0: 1.0, 1: 1.5, 2: 1.5}, {0: 1, 1: 4, 2: 8}) == ("draft", 1)
    # CPU-like cost: 4 rows 1.45x, 12 rows 2.2x -> 1.6/1.45 = 1.10 beats 2.0/2.2 and 1.0 by >5%
    assert guard({1: 1.0, 4: 1.45, 8: 1.8, 12: 2.2}).choose(e, rows) == ("draft", 1)
    # nothing pays: 1.6 / 1.6 = 1.0 < 1.05
    assert guard({1: 1.0, 4: 1.6, 12: 3.0}).choose(e, rows)[0] == "greedy"
    # a 4% gain is below min_gain 5%, a 10% one above
    assert guard({1: 1.0, 4: 1.54}).choose({0: 1.0, 1: 1.6}, {0: 1, 1: 4})[0] == "greedy"
    assert guard({1: 1.0, 4: 1.45}).choose({0: 1.0, 1: 1.6}, {0: 1, 1: 4})[0] == "draft"
    # measured drafting overhead counts against drafting (in one-row-step units)
    g = guard({1: 1.0, 4: 1.45})
    g.one_row_s, g.overhead_s = 0.1, 0.05
    assert g.choose({0: 1.0, 1: 1.6}, {0: 1, 1: 4})[0] == "greedy"  # 1.6 / (1.45 + 0.5) < 1.05


def test_guard_probe_cadence_and_calibration_per_batch_size():
    g = WallClockGuard({"adaptive": True, "probe_every": 3})
    assert [g.greedy_or_probe() for _ in range(7)] == ["greedy", "greedy", "probe"] * 2 + ["greedy"]
    # cost-aware cadence: a 3.4x probe comes every (3.4 - 1) / 0.025 = 96 greedy decisions, a cheap one every 3
    c = guard({1: 1.0, 4: 1.02, 25: 3.4}, probe_every=3)
    assert [c.greedy_or_probe(4) for _ in range(3)][-1] == "probe"
    modes = [c.greedy_or_probe(25) for _ in range(96)]
    assert modes.count("probe") == 1 and modes[-1] == "probe"
    # exploring stops once it has cost min_obs one-row steps beyond greedy: 4 steps of 3.4x with min_obs 10
    e = guard({1: 1.0, 25: 3.4}, min_obs=10)
    n = 0
    while e.may_explore(25):
        e.done("explore", 25)
        n += 1
    assert n == 4 and e.explored == pytest.approx(9.6)
    calls = []

    def measure():
        calls.append(1)
        return {1: 0.1, 4: 0.2}

    for b in (1, 2, 1, 2):
        g.start(b, measure)
    assert len(calls) == 2 and g.cost(4) == pytest.approx(2.0) and g.one_row_s == 0.1
    fixed = guard({1: 1.0, 4: 3.0})
    fixed.start(1, measure)
    assert len(calls) == 2 and fixed.cost(4) == 3.0  # a cost table is never calibrated
    off = WallClockGuard({})
    off.start(1, measure)
    assert not off.enabled and len(calls) == 2
    with pytest.raises(RuntimeError):
        WallClockGuard({"adaptive": True}).choose({0: 1.0}, {0: 1})


def test_path_drafter_depth_caps(tiny_llama):
    """Prompt lookup / STAND pick the depth cap from the acceptance estimates and the cost table."""
    model, tok = tiny_llama.model, tiny_llama.tokenizer
    buffers, _ = union_tree([[(5, 6, 7)]])  # a 3-chain: rows 4 (2, 3 padded to 4) and 4
    cases = [
        ({1: 1.0, 64: 1.0}, "draft", 3),  # flat: the whole chain
        ({1: 1.0, 4: 1.3, 8: 5.0}, "draft", 3),  # all caps pad to 4 rows: the deepest
        ({1: 1.0, 4: 3.0}, "greedy", 0),  # nothing pays
    ]
    for table, mode, depth in cases:
        d = build_decoder("prompt-lookup", model, tok, adaptive=True, cost_table=table, min_obs=4)
        d.acceptance.observe(np.array([3] * 8), np.array([3, 3, 3, 3, 2, 2, 1, 0]))
        assert d._decide(buffers) == (mode, depth), table
    d = build_decoder("prompt-lookup", model, tok, adaptive=True, cost_table={1: 1.0, 4: 3.0}, min_obs=4)
    assert d._decide(buffers) == ("explore", 3)  # too few observations yet
    # a probe drafts to the deepest of the cheapest chunks: a 5-chain's depths 1-3 all run 4 rows, 4-5 run 5-6
    chain5, _ = union_tree([[(5, 6, 7, 8, 9)]])
    d = build_decoder(
        "prompt-lookup",
        model,
        tok,
        adaptive=True,
        cost_table={1: 1.0, 4: 3.0, 8: 6.0},
        min_obs=4,
        probe_every=2,
        min_gain=0.0,
        num_draft=5,
    )
    d.acceptance.observe(np.array([5] * 8), np.array([0] * 8))
    assert [d._decide(chain5) for _ in range(2)] == [("greedy", 0), ("probe", 3)]
    # a wide STAND tree: 2 nodes at depth 1 (3 rows, padded to 4), 6 to depth 2 (7 rows); costly 7 rows -> depth 1
    wide, _ = union_tree([[(1, 2), (1, 3), (4, 5), (4, 6)], [(7, 8)]])
    s = build_decoder("stand", model, tok, adaptive=True, cost_table={1: 1.0, 4: 1.2, 7: 4.0}, min_obs=4)
    s.acceptance.observe(np.array([2] * 8), np.array([2, 1, 1, 1, 1, 1, 0, 0]))
    assert s._decide(wide) == ("draft", 1)


@pytest.mark.parametrize("name", ["prompt-lookup", "lookahead", "stand"])
def test_guard_falls_back_to_greedy_losslessly(tiny_llama, name):
    model, tok = tiny_llama.model, tiny_llama.tokenizer
    prompts = [tok("----------").input_ids, tok("abab abab abab").input_ids]
    expect = [g.tokens for g in build_decoder("greedy", model, tok).generate(prompts, 40, StopCriteria())]
    dec = build_decoder(
        name,
        model,
        tok,
        adaptive=True,
        min_obs=3,
        probe_every=5,
        online_cost=False,
        cost_table={1: 1.0, 4: 50.0, 64: 60.0},
    )  # tiny models' real costs are flat
    out = dec.generate_all(prompts, 40, StopCriteria())
    assert [g.tokens for g in out] == expect
    steps = dec.describe()["guard"]["steps"]
    assert steps["greedy"] > 0 and steps["draft"] == steps["explore"] == steps["probe"] == 0  # all too costly
    # a moderate cost: it explores within its budget, then probes at the fixed cadence
    dec = build_decoder(
        name,
        model,
        tok,
        adaptive=True,
        min_obs=3,
        probe_every=5,
        online_cost=False,
        cost_table={1: 1.0, 4: 1.02, 64: 1.02},
        min_gain=100.0,
    )  # no draft can gain 100x
    assert [g.tokens for g in dec.generate_all(prompts, 40, StopCriteria())] == expect
    steps = dec.describe()["guard"]["steps"]
    assert steps["draft"] == 0 and steps["explore"] > 0 and steps["greedy"] >= 4 * steps["probe"] > 0
    # a flat (GPU-like) cost: the guard drafts and drafts get accepted
    dec = build_decoder(name, model, tok, adaptive=True, min_obs=3, cost_table={1: 1.0, 64: 1.0}, online_cost=False)
    out = dec.generate_all(prompts, 40, StopCriteria())
    assert [g.tokens for g in out] == expect
    assert dec.describe()["guard"]["steps"]["draft"] > 0 and max(a for g in out for a in g.accepted) > 1
    # calibrated on the live cache (what it then decides depends on the machine's timings)
    dec = build_decoder(name, model, tok, adaptive=True, min_obs=3, calib_reps=1)
    assert [g.tokens for g in dec.generate_all(prompts, 40, StopCriteria())] == expect
    assert set(dec.describe()["guard"]["cost"]["table"]) == set(calibration_rows(dec.max_rows))


def test_chunk_rows_and_modeled_steps(tiny_llama, monkeypatch):
    """Every forward's chunk rows are recorded (prefill 0; padding and extra rows counted) and priced."""
    model, tok = tiny_llama.model, tiny_llama.tokenizer
    prompt = tok("abab abab abab").input_ids
    g = build_decoder("prompt-lookup", model, tok, num_draft=2).generate([prompt], 12, StopCriteria())[0]
    rows = g.extra["chunk_rows"]
    assert rows[0] == 0 and len(rows) == len(g.accepted)
    assert all(r == (1 if d == 0 else 4) for r, d in zip(rows[1:], g.extra["drafted"][1:]))  # 2-3 rows pad to 4
    p = build_decoder("probing", model, tok, bc=10).generate([prompt], 6, StopCriteria())[0]
    assert p.extra["chunk_rows"][1] == 2 * (p.extra["drafted"][1] + 1)  # every node carries its mask
    cost = CostModel({1: 1.0, 4: 1.5, 8: 2.0})
    assert modeled_steps(rows, cost) == pytest.approx(sum(1.0 if r == 1 else 1.5 for r in rows[1:]))
    measured = calibrate_on_prompt(model, prompt, max_rows=8, reps=1)
    assert set(measured.as_dict()["table"]) == {1, 4, 8} and measured(1) == 1.0 and "head" not in measured.as_dict()
    # the head's prices by rows run, far below any forward's (timed once, a loaded machine could put a head above
    # the forward it is part of, which the cost model refuses): what is checked is which price each row count gets
    monkeypatch.setattr(cost_module, "measure_head_costs", lambda model, rows, reps: {r: 1e-9 * r for r in rows})
    with_head = calibrate_on_prompt(model, prompt, rows=[1, 3, 2], reps=1, pad_small_chunks=False, head=True)
    assert set(with_head.as_dict()["head"]) == {1, 2, 3} and set(with_head.as_dict()["table"]) == {1, 2, 3}
    padded = calibrate_on_prompt(model, prompt, rows=[1, 2, 3, 4], reps=1, head=True).as_dict()["head"]
    assert padded[2] == padded[3] == padded[4] == pytest.approx(4 * padded[1])  # 2-3 rows run padded to 4: their
    # head price is the 4 rows' one (prices are relative to the one-row forward); unpadded, each row count its own
    head = with_head.as_dict()["head"]
    assert head[2] == pytest.approx(2 * head[1]) and head[3] == pytest.approx(3 * head[1])


def test_layer_forwards_priced_by_hand():
    """Forwards that skip layers (paper 4): the head on one row plus each segment's share of the layers' price."""
    cost = CostModel({1: 10.0, 4: 20.0}, online=False, head={1: 2.0, 4: 5.0})
    assert cost.head_cost(1) == pytest.approx(0.2) and cost.body_cost(1) == pytest.approx(0.8)
    body3 = (10 + 2 / 3 * 10 - (2 + 2 / 3 * 3)) / 10  # rows 3 interpolated between the 1- and 4-row prices
    assert cost.body_cost(3) == pytest.approx(body3)
    late, start = [[8, 1]], [[8, 1], [22, 3]]
    assert layer_forward_steps([[[30, 1]]], 30, cost) == pytest.approx(1.0)  # a full one-row forward
    assert layer_forward_steps([late], 30, cost) == pytest.approx(0.2 + 8 / 30 * 0.8)
    assert layer_forward_steps([start], 30, cost) == pytest.approx(0.2 + 8 / 30 * 0.8 + 22 / 30 * body3)

    def gen(**extra):
        return GenerationResult([5] * 4, [1] * 4, 3, 0.0, 0.0, "length", extra)

    g = gen(num_layers=30, layer_forwards=[late, late, start])
    assert generation_steps(g, cost) == pytest.approx(2 * (0.2 + 8 / 30 * 0.8) + 0.2 + 8 / 30 * 0.8 + 22 / 30 * body3)
    assert generation_steps(gen(turns=[g.extra, g.extra]), cost) == pytest.approx(2 * generation_steps(g, cost))
    assert generation_steps(gen(), cost) == 3.0  # greedy: one priced step per forward after the prefill
    with pytest.raises(ValueError, match="no output-head prices"):
        layer_forward_steps([late], 30, CostModel({1: 1.0}))
    with pytest.raises(ValueError, match="head costs"):
        CostModel({1: 1.0, 4: 2.0}, head={1: 1.5, 4: 1.0})
