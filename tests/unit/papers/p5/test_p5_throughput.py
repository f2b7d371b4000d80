"""The throughput model by hand on the hand-made rank table (states 0..7, `test_p5_search.hand_table`): step prices
(verification by rows, refused beyond the timed table; drafting after the score's chain; Hydra++'s prefix update
by the previous step's accepted rows), a tree's row of the throughput frontier, the hull, the candidates, and the
τ and ladder sweeps with their objective (priced speed, not accept length) and static ends."""

from __future__ import annotations

import pytest

from mtp_core.papers.p5.engines import OfflineEngine, static_policy
from mtp_core.papers.p5.settings import rows_needed
from mtp_core.papers.p5.throughput import (
    NEVER_LEAVE_B,
    NEVER_LEAVE_S,
    StepPrices,
    candidate_trees,
    decode_seconds,
    hull,
    ladder_candidates,
    ladder_sweep,
    tau_settings,
    tau_sweep,
    throughput_row,
)
from tests.unit.papers.p5.test_p5_search import hand_table

S, B = ((0,),), ((0,), (0, 0))  # S accepts 1, 0, 1, 1 at states 0, 2, 3, 5; B accepts 2, 2, 0 at states 0, 3, 6
BANK = {"s": S, "b": B}


def table_with_p0():
    table = hand_table()
    table[0].p0[:] = [0.9, 0.1, 0.1, 0.9, 0.1, 0.9, 0.1, 0.9]  # the score (base_top1_prob) at each state
    return table


def prices(verify: list[float], chain: float = 0.0, after_chain: float = 0.1) -> StepPrices:
    """Unpadded chunks of 1-4 rows priced `verify` s; drafting 0.1 s per tree, `after_chain` after the score's
    chain, which costs `chain`; prefill 1 s."""
    p = StepPrices([1, 2, 3, 4], verify, chain=chain, prefill=[1.0], pad_small_chunks=False)
    p.draft = {"s": 0.1, "b": 0.1}
    p.draft_after_chain = {"s": after_chain, "b": after_chain}
    return p


def test_verification_prices_refuse_trees_wider_than_the_timed_table():
    """np.interp clamps: an 88-node tree was priced as the 64-row chunk, the widest the search timed."""
    p = StepPrices([1, 4, 8, 16, 32, 64], [1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
    assert p.verify(63) == 6.0 and p.verify(47) == pytest.approx(5.0)  # 48 rows: between 32 and 64
    with pytest.raises(ValueError, match="a tree of 88 nodes verifies 89 rows, the prices reach 64"):
        p.verify(88)
    assert p.verify(1) == 1.5  # 2 rows padded to 4 as the tree core pads them
    assert rows_needed([16, 32, 64], 0.4, [63]) == 90  # int(64 x 1.4) = 89 nodes + the root row
    assert rows_needed([2, 4, 8], 0.4, [63]) == 64 and rows_needed([2, 4, 8], 0.4) == 12


def test_step_prices_by_hand_with_the_prefix_update():
    p = prices([1.0, 1.2, 1.5, 2.0], chain=0.2, after_chain=0.05)
    p.advance = {1: 0.01, 2: 0.02, 3: 0.03}  # Hydra++'s prefix layer on m rows
    # step 0: S, no score; step 1: S, no score, after a step that accepted 1 (2 rows enter the prefix layer);
    # step 2: B after a scored choice, after a step that accepted 0 (1 row)
    got = decode_seconds(p, ["s", "s", "b"], BANK, [1, 0, 2], [False, False, True])
    assert got == pytest.approx((1.2 + 0.1) + (1.2 + 0.1 + 0.02) + (1.5 + 0.2 + 0.05 + 0.01))
    # a run reaching only the root-only tree drafts nothing: verifications alone
    assert decode_seconds(p, ["r", "r"], {"r": ()}, [0, 0], [False, False], drafting=False) == 2.0


def test_the_prefix_update_price_reads_the_rows_the_decoder_feeds(monkeypatch):
    """The price of each step's prefix update is read at the rows the Hydra++ drafter really runs its prefix layer
    on (accepted drafts + 1 of the step before), recorded from a real decode of the tiny world."""
    from mtp_core.decoding import StopCriteria, build_decoder
    from tests.unit.papers.p5.p5_world import NEW_TOKENS, world

    w = world()
    dec = build_decoder("hydra", w.loaded.model, w.loaded.tokenizer, heads=w.heads["hydra"], tree=[[0], [0, 0], [1]])
    fed: list[int] = []
    fn = dec.heads.prefix_forward

    def spy(h, pos, mask, cache):
        fed.append(int(h.shape[1]))
        return fn(h, pos, mask, cache)

    monkeypatch.setattr(dec.heads, "prefix_forward", spy)
    (g,) = dec.generate(w.prompts[:1], NEW_TOKENS, StopCriteria())
    fed = fed[1:]  # the first call runs over the prompt (the prefill's part)
    priced: list[int] = []

    class Recording(StepPrices):
        def advance_s(self, rows: int) -> float:
            priced.append(rows)
            return 0.0

    p = Recording([1, 4], [1.0, 1.0], draft={"t": 0.0}, advance={1: 0.0})
    steps = len(g.accepted) - 1
    decode_seconds(p, ["t"] * steps, {"t": ((0,), (0, 0), (1,))}, [a - 1 for a in g.accepted[1:]], [False] * steps)
    assert priced == fed and len(fed) == steps - 1 and max(fed) > 1


def test_a_tree_row_of_the_throughput_frontier_by_hand():
    table = table_with_p0()
    p = prices([1.0, 1.2, 1.5, 2.0])
    run = OfflineEngine(table, 10).run({"b": B}, static_policy("b"), "base_top1_prob")
    assert run.trees == [["b"] * 3] and run.accepts == [[2, 2, 0]] and run.tokens == [8]
    row = throughput_row(p, run, "b", B, {"depth": 2})
    # 3 steps of a 3-row verification (1.5 s) + drafting (0.1 s), prefill 1 s, 8 tokens; greedy: 1 + 7 one-row steps
    assert row["modeled_tokens_per_s"] == pytest.approx(8 / (1 + 3 * 1.6))
    assert row["modeled_speedup_vs_greedy"] == pytest.approx((1 + 7 * 1.0) / (1 + 3 * 1.6))
    assert row["seconds_per_decode_step"] == pytest.approx(1.6)
    assert row["output_tokens_per_decode_step"] == pytest.approx(7 / 3)
    assert row["mean_accept"] == pytest.approx(4 / 3) and row["forwards"] == 4
    assert (row["n_nodes"], row["tree_depth"], row["depth"], row["tree"]) == (2, 2, 2, [[0], [0, 0]])


def test_hull_and_candidates():
    rows = [
        {"id": "a", "n_nodes": 1, "modeled_tokens_per_s": 1.0},
        {"id": "b", "n_nodes": 3, "modeled_tokens_per_s": 0.9},
        {"id": "c", "n_nodes": 4, "modeled_tokens_per_s": 2.0},
    ]
    assert [r["id"] for r in hull(rows)] == ["a", "c"]
    self_rows = [
        {"id": "pub", "biased": None, "self": 1.0, "n_nodes": 63, "depth": 4},
        {"id": "x", "biased": 1.0, "self": 1.0, "n_nodes": 2, "depth": 2},
        {"id": "y", "biased": 1.2, "self": 0.9, "n_nodes": 3, "depth": 2},
        {"id": "z", "biased": 1.5, "self": 1.5, "n_nodes": 3, "depth": 3},
        {"id": "u", "biased": 1.6, "self": 1.4, "n_nodes": 4, "depth": 3},
    ]
    assert [r["id"] for r in candidate_trees(self_rows)] == ["pub", "x", "z"]  # per depth: x (D 2); z (D 3)
    assert [r["id"] for r in candidate_trees(self_rows, "global-frontier")] == ["pub", "x", "z"]
    assert [r["id"] for r in candidate_trees(self_rows, "all")] == ["pub", "x", "y", "z", "u"]


def test_tau_settings_hold_both_static_ends():
    assert tau_settings([0.5], [1.0, 0.5]) == [
        (0.5, 0.5, 1.0),
        (0.5, 0.25, 0.5),
        (NEVER_LEAVE_S, NEVER_LEAVE_S, 1.0),
        (NEVER_LEAVE_B, NEVER_LEAVE_B, 1.0),
    ]
    assert tau_settings([1.0], [1.0]) == [(1.0, 1.0, 1.0), (-1.0, -1.0, 1.0)]  # a grid end is not repeated


def test_tau_sweep_by_hand_where_switching_pays():
    """The score is free (chain 0): on B, 0.9 at states 0 and 3 keeps B (it accepts 2 there), 0.1 at state 6
    returns to S, whose step is cheaper than B's where neither accepts."""
    table = table_with_p0()
    sweep = tau_sweep(
        OfflineEngine(table, 10), prices([1.0, 1.2, 1.5, 2.0]), BANK, "s", "b", [0.05, 0.5], [1.0], "base_top1_prob"
    )
    got = {(r["tau_on"], r["tau_off"]): r for r in sweep}
    assert [(r["tau_on"], r["tau_off"]) for r in sweep] == [(0.5, 0.5), (0.05, 0.05), (-1.0, -1.0), (1.0, 1.0)]
    assert got[0.5, 0.5]["modeled_tokens_per_s"] == pytest.approx(8 / (1 + 1.6 + 1.6 + 1.3))  # B B S
    assert got[0.05, 0.05]["modeled_tokens_per_s"] == pytest.approx(8 / (1 + 3 * 1.6))  # B B B (0.1 > 0.05)
    assert got[-1.0, -1.0]["modeled_tokens_per_s"] == pytest.approx(8 / (1 + 3 * 1.6))  # never leave B: static B
    assert got[1.0, 1.0]["modeled_tokens_per_s"] == pytest.approx(8 / (1 + 4 * 1.3))  # never leave S: static S
    assert got[0.5, 0.5]["share"] == {"s": pytest.approx(1 / 3), "b": pytest.approx(2 / 3)}
    assert got[1.0, 1.0]["share"] == {"s": 1.0, "b": 0.0} and got[-1.0, -1.0]["share"] == {"s": 0.0, "b": 1.0}


def test_tau_sweep_objective_is_speed_not_accept_length():
    """B's 3-row verification costs 5 one-row steps: every setting that uses B accepts more per step (4/3 against
    S's 3/4) and is slower; the sweep picks never leaving S."""
    table = table_with_p0()
    p = prices([1.0, 1.2, 5.0, 6.0], chain=0.2, after_chain=0.05)
    sweep = tau_sweep(OfflineEngine(table, 10), p, BANK, "s", "b", [0.5], [1.0], "base_top1_prob")
    best, rest = sweep[0], sweep[1:]
    assert (best["tau_on"], best["tau_off"]) == (1.0, 1.0) and best["mean_accept"] == pytest.approx(0.75)
    assert best["modeled_tokens_per_s"] == pytest.approx(8 / (1 + 4 * 1.3))  # static S reads no score
    assert all(r["mean_accept"] == pytest.approx(4 / 3) for r in rest)
    tau = next(r for r in rest if r["tau_on"] == 0.5)
    assert tau["modeled_tokens_per_s"] == pytest.approx(8 / (1 + 2 * (5.0 + 0.25) + (1.2 + 0.25)))  # scored steps


def test_the_never_switch_end_on_a_root_only_s_is_greedy():
    table = table_with_p0()
    p = prices([1.0, 1.2, 1.5, 2.0])
    p.draft["r"] = p.draft_after_chain["r"] = 0.1
    sweep = tau_sweep(OfflineEngine(table, 10), p, {"r": (), "b": B}, "r", "b", [0.5], [1.0], "base_top1_prob")
    never = next(r for r in sweep if r["tau_on"] == NEVER_LEAVE_S)
    assert never["modeled_speedup_vs_greedy"] == pytest.approx(1.0) and never["share"]["r"] == 1.0


def test_ladder_sweep_by_hand():
    assert ladder_candidates(3, [0.3]) == [pytest.approx([1 / 3, 2 / 3]), pytest.approx([0.15, 0.3])]
    assert ladder_candidates(2, [0.05, 0.5]) == [[0.5], [0.05]]  # the default 1/2 is not repeated
    table = table_with_p0()
    sweep = ladder_sweep(
        OfflineEngine(table, 10), prices([1.0, 1.2, 1.5, 2.0]), BANK, ["s", "b"], [0.05, 0.5], "base_top1_prob"
    )
    assert [r["thresholds"] for r in sweep] == [[0.5], [0.05]]
    # [0.5]: 0.9 -> b, 0.1 -> s: b b s (as binary τ 0.5); [0.05]: every score above: b b b
    assert sweep[0]["modeled_tokens_per_s"] == pytest.approx(8 / (1 + 1.6 + 1.6 + 1.3))
    assert sweep[1]["modeled_tokens_per_s"] == pytest.approx(8 / (1 + 3 * 1.6))


def test_ladder_sweep_ranks_by_speed_not_by_the_order_tried():
    """Scores 0.3 where B accepts 2, 0.1 elsewhere: the public default threshold 1/2 never reaches B (static S),
    the swept 0.2 takes B exactly there and is faster, so it comes first."""
    table = hand_table()
    table[0].p0[:] = [0.3, 0.1, 0.1, 0.3, 0.1, 0.1, 0.1, 0.1]
    sweep = ladder_sweep(
        OfflineEngine(table, 10), prices([1.0, 1.2, 1.5, 2.0]), BANK, ["s", "b"], [0.2], "base_top1_prob"
    )
    assert [r["thresholds"] for r in sweep] == [[0.2], [0.5]]
    assert sweep[0]["modeled_tokens_per_s"] == pytest.approx(8 / (1 + 1.6 + 1.6 + 1.3))  # b b s
    assert sweep[1]["modeled_tokens_per_s"] == pytest.approx(8 / (1 + 4 * 1.3)) and sweep[1]["share"]["b"] == 0.0
