"""Paper 2's evaluation jobs against brute force: the greedy references, the acceptance job's AR / CAR counters equal
to what `mtp-spec` itself accepts at every step (the first step after the prefill included; D drafts out of the
job's max(depths) simulated rows), the simulation walked by hand, the teacher-forced match position by position,
the validation metrics (KL(base ‖ main), agree@k, means over windows), the Top-N mass, and the speed job's
speedups (per protocol, per benchmark, modeled steps by hand)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from mtp_core.decoding import StopCriteria, build_decoder
from mtp_core.decoding.pricing import CostModel
from mtp_core.io import read_jsonl
from mtp_core.models.heads import save_heads
from mtp_core.models.load import load_model, prepare_base_model
from mtp_core.papers.p2.acceptance import simulate_steps, teacher_forced_match
from mtp_core.papers.p2.decoder import MTPSpecDecoder
from mtp_core.papers.p2.evaluate import acceptance_job, read_reference, reference_job, topn_mass, validation_metrics
from mtp_core.papers.p2.settings import P2LossConfig
from mtp_core.papers.p2.speed import modeled_steps, speed_job
from mtp_core.results.write import samples_path
from tests.conftest import tiny_spec
from tests.unit.papers.p2.p2_helpers import train_heads

BUDGET, EXTRA, DEPTHS, K = 16, 5, (1, 2, 4), 2
ROWS = {
    "s1": [
        {"id": "a", "category": "x", "prompt": "The cat sat on the"},
        {"id": "b", "category": "y", "prompt": "one two three"},
    ],
    "s2": [{"id": "c", "category": "z", "prompt": "What is 2 + 2?", "answer": "4"}],
}


def test_simulation_by_hand():
    """Prompt x_0 x_1 x_2; the prefill emits x_3, so the first step compares the drafts head k made at position 2
    (x_3's predecessor). Match rows for 4 depths, D = 2: a step accepts at most D drafts. Budget 8 tokens: x_3,
    then steps of 3, 1, 2 and 1 tokens."""
    ids = list(range(10, 26))
    match = np.zeros((4, len(ids)), dtype=bool)
    match[:, 2] = True  # step 1 at n = 3: all 4 depths match; D = 2 caps it at 2
    match[:, 3] = False  # (position n: not this step's)
    match[0, 6], match[1, 6] = True, False  # step 3 at n = 7: one draft
    steps = simulate_steps(match, ids, 3, 2, 8, StopCriteria(), None)
    assert steps == [2, 0, 1, 0]
    assert simulate_steps(match, ids, 3, 4, 8, StopCriteria(), None) == [4, 0, 0]  # 1 + 5 + 1 + 1 tokens
    stop_at = StopCriteria(eos_ids=(ids[6],))  # x_6 ends the row inside step 1's tokens
    assert simulate_steps(match, ids, 3, 4, 8, stop_at, None) == [4]
    with pytest.raises(ValueError, match="continuation ends"):
        simulate_steps(match, ids[:10], 3, 4, 8, StopCriteria(), None)


def test_modeled_steps_by_hand():
    """accepted [1, 2, 1, 3]: the prefill, then verifications accepting m = 1, 0, 2 drafts with D = 2. Each
    verification runs D + 1 = 3 rows (padded to 4); the proposals before verifications 2 and 3 run depth d on
    m_prev + d rows: (2, 3) after m = 1, (1, 2) after m = 0."""
    main = CostModel({1: 2.0, 4: 3.0}, online=False)  # one-row step 2 s: 4 rows cost 1.5 steps
    head_s = {1: 0.1, 2: 0.2, 3: 0.3, 4: 0.4, 5: 0.5}
    want = 3 * 1.5 + (0.2 + 0.3 + 0.1 + 0.2) / 2.0
    assert modeled_steps([1, 2, 1, 3], 2, main, head_s) == pytest.approx(want)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """References of a tiny trunk, K = 2 heads trained on its own continuations, and the acceptance job at D = 1, 2
    and 4 (the loop)."""
    torch.set_num_threads(1)
    d = tmp_path_factory.mktemp("p2acc")
    spec = tiny_spec("qwen3")
    loaded = load_model(spec, base_dir=prepare_base_model(spec, d / "model"))
    refs = {ps: str(d / f"ref-{ps}.json") for ps in ROWS}
    reference_job(loaded, ROWS, refs, BUDGET, EXTRA, batch_size=2, main="base", scale="tiny", config_hash="h")
    seqs = [s["prompt_ids"] + s["continuation"] for ps in refs for s in read_reference(refs[ps])]
    heads = train_heads(loaded.model, K, seqs, 90)
    outs = {(ps, depth): str(d / f"{ps}-h{depth}.json") for ps in ROWS for depth in DEPTHS}
    acceptance_job(loaded, heads, "r", DEPTHS, refs, outs, BUDGET, scale="tiny", config_hash="h", heads_dir="hd")
    return {"loaded": loaded, "heads": heads, "refs": refs, "outs": outs, "dir": d}


def test_references_are_greedy_past_the_budget(job):
    loaded = job["loaded"]
    greedy = build_decoder("greedy", loaded.model, loaded.tokenizer)
    for ps, rows in ROWS.items():
        samples = read_reference(job["refs"][ps])
        ids = [loaded.encode(r["prompt"]) for r in rows]
        assert [s["prompt_ids"] for s in samples] == ids
        trimmed = greedy.generate_all(ids, BUDGET, loaded.stop_criteria())
        assert [s["tokens"] for s in samples] == [g.tokens for g in trimmed]
        full = greedy.generate_all(ids, BUDGET + EXTRA, StopCriteria())
        assert [s["continuation"] for s in samples] == [g.tokens for g in full]


def _counters(steps: list[int], depth: int) -> tuple[list[int], list[int], int]:
    """A_j = steps that accepted >= j drafts; C_j^cmp = steps that compared draft j (accepted >= j - 1)."""
    a = [sum(1 for m in steps if m >= j) for j in range(1, depth + 1)]
    return a, [sum(1 for m in steps if m >= j - 1) for j in range(1, depth + 1)], len(steps)


def test_acceptance_counters_are_the_decoders(job):
    """Every prompt's accepted count at every step equals `mtp-spec`'s (batch 1, the trunk's stops, the budget),
    and the pooled counters, AR, CAR and τ follow Eqs. 6-7 from them."""
    loaded, heads = job["loaded"], job["heads"]
    accepted_any = 0
    for ps, rows in ROWS.items():
        ids = [loaded.encode(r["prompt"]) for r in rows]
        for depth in DEPTHS:
            dec = MTPSpecDecoder(loaded.model, loaded.tokenizer, heads=heads, num_drafts=depth)
            steps = [[a - 1 for a in g.accepted[1:]] for g in dec.generate_all(ids, BUDGET, loaded.stop_criteria())]
            path = job["outs"][ps, depth]
            samples = list(read_jsonl(samples_path(path)))
            assert [s["steps"] for s in samples] == steps
            for s, st in zip(samples, steps):
                assert (s["A"], s["C_cmp"], s["C_step"]) == _counters(st, depth)
            a, c_cmp, c_step = _counters([m for st in steps for m in st], depth)
            res = json.loads(Path(path).read_text())
            h = res["decode_stats"]["heads"]
            assert (h["A"], h["C_cmp"], h["C_step"]) == (a, c_cmp, c_step)
            assert h["ar"] == pytest.approx([x / max(y, 1) for x, y in zip(a, c_cmp)])
            assert h["car"] == pytest.approx([x / c_step for x in a])
            assert h["tau"] == pytest.approx(1 + sum(a) / c_step)
            assert res["settings"]["loop"] == (depth > K) and res["n"] == len(rows)
            for r, st in zip(rows, steps):
                cat = res["per_category"][r["category"]]["heads"]
                assert cat["A"] == _counters(st, depth)[0]  # one prompt per category here
            accepted_any += max(m for st in steps for m in st) >= min(depth, 2)
    assert accepted_any >= 4  # trained heads: most settings accept two drafts in a row somewhere


def test_teacher_forced_match_position_by_position(job):
    """match[k-1, p]: head k at position p, run causally over x_0 .. x_p with tokens x_{i+k}, predicts x_{p+k+1}."""
    from transformers.masking_utils import create_causal_mask

    loaded, heads = job["loaded"], job["heads"]
    trunk = loaded.model
    s = read_reference(job["refs"]["s1"])[0]
    ids = s["prompt_ids"] + s["continuation"]
    start = len(s["prompt_ids"]) - 1
    got = teacher_forced_match(trunk, heads, ids, start, 3)
    assert not got[:, :start].any()
    with torch.inference_mode():
        for p in range(start, len(ids)):
            x = torch.tensor([ids[: p + 1]])
            h = trunk.model(input_ids=x).last_hidden_state
            pos = torch.arange(p + 1)[None]
            mask = create_causal_mask(
                config=heads.block_config, inputs_embeds=h, attention_mask=None, cache=None, position_ids=pos
            )
            for k in range(1, 4):
                if p + k + 1 >= len(ids):
                    assert not got[k - 1, p]
                    continue
                h = heads.depth_forward(trunk, k, h, torch.tensor([ids[k : p + 1 + k]]), pos, mask)
                assert got[k - 1, p] == (int(trunk.lm_head(h[0, -1]).argmax()) == ids[p + k + 1])
    assert got.sum() > 5


def test_validation_metrics_by_window(job, tmp_path):
    """KL(base ‖ main) = Σ p_base (log p_base - log p_main) per token; agree@1 = argmax of head 1 at i equals the
    main argmax at i + 1; each a mean over every window, a short last batch counting by its windows."""
    loaded, heads = job["loaded"], job["heads"]
    spec = tiny_spec("qwen3", init_seed=3)
    base = load_model(spec, base_dir=prepare_base_model(spec, tmp_path / "base"))
    windows = np.random.default_rng(0).integers(3, 250, size=(6, 12))
    m = validation_metrics(loaded, heads, windows, P2LossConfig(topn=16), str(tmp_path / "v.json"), base, batch_size=4)
    kls, agree = [], []
    with torch.inference_mode():
        for w in windows:
            x = torch.tensor([w.tolist()])
            lp_main = loaded.model(input_ids=x).logits[0].log_softmax(-1)
            lp_base = base.model(input_ids=x).logits[0].log_softmax(-1)
            kls.append(float((lp_base.exp() * (lp_base - lp_main)).sum(-1).mean()))
            h0 = loaded.model.model(input_ids=x).last_hidden_state
            h1 = heads.forward_train(loaded.model, h0, x)[0]
            p1 = loaded.model.lm_head(h1[0, : 12 - 2]).argmax(-1)
            agree.append(float((p1 == lp_main[1 : 12 - 1].argmax(-1)).float().mean()))
    assert m["kl_base_main"] == pytest.approx(np.mean(kls), rel=1e-5)
    assert m["agree@1"] == pytest.approx(np.mean(agree), rel=1e-5)
    one = validation_metrics(loaded, heads, windows, P2LossConfig(topn=16), str(tmp_path / "w.json"), batch_size=1)
    assert one["loss_main"] == pytest.approx(m["loss_main"], rel=1e-5)


def test_topn_mass_by_hand(job, tmp_path):
    trunk = job["loaded"].model
    windows = np.random.default_rng(1).integers(3, 250, size=(3, 10))
    out = topn_mass(trunk, windows, str(tmp_path / "t.csv"), str(tmp_path / "t.json"), batch_size=2)
    with torch.inference_mode():
        probs = [trunk(input_ids=torch.tensor([w.tolist()])).logits[0].softmax(-1) for w in windows]
    rows = [sorted(p.tolist(), reverse=True) for ps in probs for p in ps]
    vocab = trunk.config.vocab_size
    for n in (1, 2, 5, 10, 100, vocab):
        assert out["mass"][str(n)] == pytest.approx(np.mean([sum(r[:n]) for r in rows]), rel=1e-5)
    assert out["positions"] == 30 and out["mass"][str(vocab)] == pytest.approx(1.0, abs=1e-5)
    lines = (tmp_path / "t.csv").read_text().splitlines()
    assert lines[0] == "topn,mass,stderr" and lines[-1].startswith(f"{vocab},1.0000")


def test_speed_job_speedups_per_protocol(job, tmp_path):
    """Every row's speedup is its tok/s over its protocol's baseline row (and over its own greedy row), overall
    and per benchmark; the decoded counters come from the decoder's accepted counts; modeled speeds only for
    KV-cached rows; every row is identical to greedy."""
    loaded, heads = job["loaded"], job["heads"]
    save_heads(heads, tmp_path / "h", loaded.model)
    rows = [{**r, "category": ps} for ps, rs in ROWS.items() for r in rs]
    hd = str(tmp_path / "h")
    decoders = {
        "greedy": {"decoder": "greedy"},
        "k1": {"decoder": "mtp-spec", "heads": hd, "num_drafts": 1},
        "k2": {"decoder": "mtp-spec", "heads": hd, "num_drafts": 2},
        "greedy-nokv": {"decoder": "greedy-uncached"},
        "k1-nokv": {"decoder": "mtp-spec", "heads": hd, "num_drafts": 1, "kv_cache": False},
        "k2-nokv": {"decoder": "mtp-spec", "heads": hd, "num_drafts": 2, "kv_cache": False},
    }
    refs = {
        label: {"greedy": "greedy" + ("-nokv" if "nokv" in label else ""),
                "baseline": "k1" + ("-nokv" if "nokv" in label else ""), "kv_cache": "nokv" not in label}
        for label in decoders
    }  # fmt: skip
    outs = [str(tmp_path / f"{label}.json") for label in decoders]
    speed_job({label: loaded for label in decoders}, rows, decoders, outs, refs, max_new_tokens=8, batch_size=1,
              bench={"threads": 1, "warmup": 0, "repeats": 1}, modeled=True, scale="tiny", config_hash="h")  # fmt: skip
    res = {label: json.loads(Path(p).read_text()) for label, p in zip(decoders, outs)}
    tps = {label: r["decode_stats"]["tokens_per_s"] for label, r in res.items()}
    for label, r in res.items():
        st, ref = r["decode_stats"], refs[label]
        assert st["speedup_vs_baseline"] == pytest.approx(tps[label] / tps[ref["baseline"]])
        assert st["speedup_vs_greedy"] == pytest.approx(tps[label] / tps[ref["greedy"]])
        for cat, c in r["per_category"].items():
            base_cat = res[ref["baseline"]]["per_category"][cat]["tokens_per_s"]
            assert c["speedup_vs_baseline"] == pytest.approx(c["tokens_per_s"] / base_cat)
        assert st["identical_fraction"] == 1.0 and st["identical_to_greedy"] is True
        assert r["settings"]["kv_cache"] == ref["kv_cache"] and r["settings"]["baseline"] == ref["baseline"]
        assert ("modeled_speedup_vs_baseline" in st) == ref["kv_cache"]
        if label.startswith("k"):
            steps = [
                m - 1 for s in read_jsonl(samples_path(outs[list(decoders).index(label)])) for m in s["accepted"][1:]
            ]
            depth = decoders[label]["num_drafts"]
            assert (st["heads"]["A"], st["heads"]["C_cmp"], st["heads"]["C_step"]) == _counters(steps, depth)
    assert res["k1"]["decode_stats"]["modeled_speedup_vs_baseline"] == pytest.approx(1.0)
    assert res["k2-nokv"]["decode_stats"]["heads"] == res["k2"]["decode_stats"]["heads"]  # same accepted counts
