"""Paper 4's measured numbers before they reach a table, each against a brute-force or hand computation sharing no
helper with the code under test: the teacher-forced scores (per row, per cycle offset, overall against its
per-offset parts, cluster standard errors), the teacher-forced result files at an inference τ other than the
training τ, the decoder's counts at that τ, and the speed job's layer costs (the work each timed step prices, the
modeled speed-up)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from mtp_core.decoding import StopCriteria, build_decoder
from mtp_core.decoding import layers as L
from mtp_core.models.load import LoadedModel, tiny_model, tiny_tokenizer
from mtp_core.papers.p4 import speed
from mtp_core.papers.p4.jobs import write_tf_results
from mtp_core.papers.p4.settings import CONFIG_KEY, DMTDSpec
from mtp_core.papers.p4.speed import measure_layer_costs, modeled_speedup, random_prompts
from mtp_core.papers.p4.teacher_forced import SCHEDULES, Tally, TFRows, dmtd_scores, vanilla_scores
from tests.conftest import tiny_spec

pytestmark = pytest.mark.usefixtures("one_thread")
SPEC = DMTDSpec(1, 2)  # of 6 layers: 3 thinking layers


@pytest.fixture(scope="module")
def model():
    return tiny_model(tiny_spec("qwen3", num_layers=6)).eval()


# --------------------------------------------------------------------------------------- teacher-forced


def test_tally_metrics_by_hand():
    """3 rows, τ 2: accuracy and CE overall and per offset are sums over rows; the overall accuracy is the
    token-weighted mean of the per-offset ones; standard errors treat rows as clusters:
    sqrt(k / (k - 1) · Σ_i (y_i - r x_i)²) / Σ_i x_i over the k rows with tokens."""
    t = Tally(3, 2)
    t.tokens[:] = [[3, 2], [1, 1], [4, 0]]
    t.hits[:] = [[3, 1], [0, 1], [2, 0]]
    t.ce[:] = [[0.3, 2.0], [1.5, 0.5], [2.0, 0.0]]
    m = t.metrics("none")
    assert m["tf_acc,none"]["value"] == pytest.approx(7 / 11) and m["tf_ce,none"]["value"] == pytest.approx(6.3 / 11)
    assert m["tf_acc@0,none"]["value"] == pytest.approx(5 / 8) and m["tf_acc@1,none"]["value"] == pytest.approx(2 / 3)
    assert m["tf_ce@1,none"]["value"] == pytest.approx(2.5 / 3)
    assert m["tf_acc,none"]["value"] == pytest.approx((8 * 5 / 8 + 3 * 2 / 3) / 11)  # its per-offset parts

    def cluster_se(y, x):
        use = [(a, b) for a, b in zip(y, x) if b > 0]
        r = sum(a for a, _ in use) / sum(b for _, b in use)
        k = len(use)
        return math.sqrt(k / (k - 1) * sum((a - r * b) ** 2 for a, b in use)) / sum(b for _, b in use)

    assert m["tf_acc,none"]["stderr"] == pytest.approx(cluster_se([4, 1, 2], [5, 2, 4]))
    assert m["tf_acc@1,none"]["stderr"] == pytest.approx(cluster_se([1, 1, 0], [2, 1, 0]))  # 2 rows with tokens
    one = Tally(2, 1)
    one.tokens[:] = [[2], [0]]
    one.hits[:] = [[1], [0]]
    assert one.metrics("none")["tf_acc,none"] == {"value": 0.5, "stderr": None}  # one row with tokens


def _rows(model, seed=3):
    """Three held-out rows (prompt, response lengths) right-padded, as `encode_tf_rows` lays them out."""
    g = torch.Generator().manual_seed(seed)
    seqs = [(torch.randint(3, 256, (p + r,), generator=g), p) for p, r in [(5, 7), (8, 4), (3, 9)]]
    width = max(len(s) for s, _ in seqs)
    ids = torch.full((3, width), 2, dtype=torch.long)
    for i, (s, _) in enumerate(seqs):
        ids[i, : len(s)] = s
    return TFRows(ids, torch.tensor([len(s) for s, _ in seqs]), torch.tensor([p for _, p in seqs])), seqs


def _brute(logits, seq, n, tau):
    """Hits and CE by cycle offset of one row's response tokens: the prediction of token c + 1 at column c; offset
    under the decoding schedule (c - (n - 1)) mod τ, under the training schedule c mod τ."""
    out = {s: (np.zeros(tau), np.zeros(tau), np.zeros(tau)) for s in ("none", "train_schedule")}
    for c in range(n - 1, len(seq) - 1):
        hit = float(int(logits[c].argmax()) == int(seq[c + 1]))
        ce = float(-torch.log_softmax(logits[c].double(), -1)[seq[c + 1]])
        for flt, j in (("none", (c - (n - 1)) % tau), ("train_schedule", c % tau)):
            out[flt][0][j] += 1
            out[flt][1][j] += hit
            out[flt][2][j] += ce
    return out


def _parallel_by_hand(model, seq, m):
    """Eqs. 1-5 for one unpadded row under mask m, with the model's own modules (E1D2 of 6)."""
    with torch.inference_mode():
        out = model.model(input_ids=seq[None], output_hidden_states=True)
        h_base, h_think = out.hidden_states[1], out.hidden_states[4]  # inputs of layers 1 and 4
        h = h_base + h_think * m[None, :, None].float()
        pos = torch.arange(len(seq))[None]
        mask = L.causal_mask(model, h, None, pos, 0)
        cs = model.model.rotary_emb(h, pos)
        for layer in model.model.layers[4:]:
            h = layer(h, mask, pos, None, position_embeddings=cs)
        return model.lm_head(model.model.norm(h))[0]


def test_teacher_forced_scores_against_brute_force(model):
    """Every row alone and unpadded, by hand: the vanilla model's scores, and E1D2's under both schedules at τ 2
    and 3 (the training schedule's mask by hand: M = 1 where c mod τ = 0; the decoding schedule's: the prompt,
    then every τ-th column from its last one), per row and offset; batched in 2s, right-padded."""
    data, seqs = _rows(model)
    van = vanilla_scores(model, data, batch_size=2)
    tallies = dmtd_scores(model, SPEC, data, [2, 3], batch_size=2)
    for i, (seq, n) in enumerate(seqs):
        with torch.inference_mode():
            plain = model(seq[None]).logits[0]
        tok, hit, ce = _brute(plain, seq, n, 1)["none"]
        assert (van.tokens[i, 0], van.hits[i, 0]) == (tok[0], hit[0]) == (len(seq) - n, hit[0])
        assert van.ce[i, 0] == pytest.approx(ce[0], rel=1e-5)
        for tau in (2, 3):
            for flt in SCHEDULES:
                cols = torch.arange(len(seq))
                m = cols % tau == 0 if flt == "train_schedule" else (cols < n - 1) | ((cols - (n - 1)) % tau == 0)
                tok, hit, ce = _brute(_parallel_by_hand(model, seq, m), seq, n, tau)[flt]
                got = tallies[tau, flt]
                assert got.tokens[i].tolist() == tok.tolist() and got.hits[i].tolist() == hit.tolist(), (tau, flt)
                assert got.ce[i] == pytest.approx(ce, rel=1e-4, abs=1e-4)
    for (tau, flt), t in tallies.items():  # the overall accuracy against its per-offset parts
        m = t.metrics(flt)
        n_j = t.tokens.sum(0)
        parts = sum(n_j[j] * m[f"tf_acc@{j},{flt}"]["value"] for j in range(tau)) / n_j.sum()
        assert m[f"tf_acc,{flt}"]["value"] == pytest.approx(parts)
        assert n_j.sum() == sum(len(s) - n for s, n in seqs)


# ---------------------------------------------------------------------------- the inference τ at a result


def _trained(model):
    """The tiny model as a checkpoint trained at τ 3 with E1D2 (`config.dmtd`)."""
    setattr(model.config, CONFIG_KEY, SPEC.as_config(3))
    tok = tiny_tokenizer()
    return LoadedModel("tiny", model, tok, chat_template=True, eos_ids=())


def test_teacher_forced_results_at_an_inference_tau(model, tmp_path):
    """A τ 3 model scored at τ 2 and 4 (Table 5's 3→2, 3→4): each result is that τ's (its decoder parameters, τ
    offsets, Eq. 7's PLT at that τ for E1D2 of 6: 1/τ + (τ-1)/τ · 3/6), not the training τ's; the vanilla result
    is the plain model's."""
    loaded = _trained(model)
    data, seqs = _rows(model)
    settings = {
        "vanilla": {"decoder": "vanilla"},
        "dmtd-tau2": {"decoder": "dmtd", "tau": 2},
        "dmtd-tau4": {"decoder": "dmtd", "tau": 4},
    }
    outs = [str(tmp_path / f"{s}.json") for s in settings]
    write_tf_results(
        {"scale": "tiny"},
        loaded,
        data,
        settings,
        outs,
        label="main",
        model="tiny",
        task="tf-math",
        batch_size=2,
        data_settings={"rows": len(data), "response_tokens": int((data.lengths - data.starts).sum())},
    )
    van, r2, r4 = (json.loads(Path(o).read_text()) for o in outs)
    assert van["decoder"] == {"name": "vanilla", "lossless": True, "params": {}} and "plt" not in van["settings"]
    assert van["metrics"]["tf_acc,none"]["value"] == pytest.approx(
        vanilla_scores(model, data, 2).metrics("none")["tf_acc,none"]["value"]
    )
    for res, tau in ((r2, 2), (r4, 4)):
        assert res["decoder"]["params"] == {"tau": tau, "encoding_layers": 1, "decoding_layers": 2, "combine": "add"}
        assert res["settings"]["tau"] == tau and res["settings"]["split"] == "E1D2"
        assert res["settings"]["plt"] == pytest.approx(1 / tau + (tau - 1) / tau * 3 / 6)
        assert {f"tf_acc@{j},none" for j in range(tau)} <= set(res["metrics"])
        assert f"tf_acc@{tau},none" not in res["metrics"] and res["n"] == 3
        assert res["settings"]["response_tokens"] == sum(len(s) - n for s, n in seqs)
    assert r4["metrics"]["tf_acc,none"] == pytest.approx(
        dmtd_scores(model, SPEC, data, [4], 2)[4, "none"].metrics("none")["tf_acc,none"]
    )


def test_decoder_runs_the_inference_tau_over_the_trained_one(model):
    """Generation with `tau: 4` from a τ 3 checkpoint: cycle starts at steps 0, 4, 8, ... (the prefill one), so
    N = 10 tokens take 3 starts and 7 late-only steps; measured PLT = (3·6 + 7·(1 + 2)) / (6·10)."""
    loaded = _trained(model)
    dec = build_decoder("dmtd", model, loaded.tokenizer, tau=4)
    assert dec.describe()["params"]["tau"] == 4 and build_decoder("dmtd", model, loaded.tokenizer).tau == 3
    g = dec.generate([list(range(40, 49))], 10, StopCriteria())[0]
    assert (g.extra["cycle_starts"], g.extra["late_steps"], g.extra["tau"]) == (3, 7, 4)
    assert g.extra["refill_rows"] == 2 * 4  # the starts at steps 4 and 8 refill 4 columns each
    assert g.extra["plt_measured"] == pytest.approx((3 * 6 + 7 * 3) / 60)


# ---------------------------------------------------------------------------------------------- speed


def test_modeled_speedup_by_hand():
    """τ tokens per cycle over the cycle's price (a start with its refill, τ - 1 late-only steps), in units of a
    full step: 3 · 2.0 / (3.0 + 2 · 0.5) = 1.5."""
    assert modeled_speedup({"full": 2.0, "late": 0.5, "start3": 3.0, "start2": 2.5}, 3) == pytest.approx(1.5)
    assert modeled_speedup({"full": 2.0, "late": 0.5, "start3": 3.0, "start2": 2.5}, 2) == pytest.approx(4.0 / 3.0)


def test_layer_costs_price_what_each_step_runs(model, monkeypatch):
    """The timed steps, recorded layer by layer (E1D2 of 6, 2 prompts of 5 tokens): a full step runs every layer
    on 1 column; a late-only step the encoding layer and the 2 decoding layers on 1 column; a cycle start at τ the
    encoding layer on 1 column, the 3 thinking layers on τ columns (its refill), the decoding layers on 1; and each
    leaves the cache as the prefill left it. Priced by layer columns (the work), the modeled speed-up is 1 (DMTD
    does vanilla's work); priced by layer passes (memory-bound), it is 1/PLT (Eq. 7)."""
    seen: list[list[tuple[int, int]]] = []
    caches = []
    real_new_cache = L.new_cache
    monkeypatch.setattr(L, "new_cache", lambda m: caches.append(real_new_cache(m)) or caches[-1])
    for i, layer in enumerate(model.model.layers):
        monkeypatch.setattr(layer, "forward", _recording(layer.forward, i, seen))
    lengths = []

    def price(fn, device, by):
        seen.append([])
        fn()
        lengths.append([L.cached_length(caches[0], i) for i in range(6)])
        calls = seen.pop()
        return float(sum(cols for _, cols in calls) if by == "columns" else len(calls)), calls

    steps = {}
    for by in ("columns", "passes"):

        def timed(fn, device, by=by):
            secs, calls = price(fn, device, by)
            steps.setdefault(by, []).append(calls)
            return secs

        monkeypatch.setattr(speed, "timed_call", timed)
        costs = measure_layer_costs(model, SPEC, [list(range(10, 15)), list(range(20, 25))], [2, 3], reps=1)
        if by == "columns":
            full, late, start2, start3 = steps[by]
            assert full == [(i, 1) for i in range(6)] and late == [(0, 1), (4, 1), (5, 1)]
            assert start2 == [(0, 1), (1, 2), (2, 2), (3, 2), (4, 1), (5, 1)]
            assert start3 == [(0, 1), (1, 3), (2, 3), (3, 3), (4, 1), (5, 1)]
            assert costs["modeled_speedup"] == pytest.approx({2: 1.0, 3: 1.0})
            assert lengths == [[5] * 6] * 4  # every timed step cropped back to the prefilled cache
        else:
            assert costs["modeled_speedup"] == pytest.approx({t: 1 / (1 / t + (t - 1) / t * 3 / 6) for t in (2, 3)})
        assert costs["plt"] == pytest.approx({t: 1 / t + (t - 1) / t * 3 / 6 for t in (2, 3)})
        assert costs["batch_size"] == 2 and costs["cache_tokens"] == 5 and costs["split"] == "E1D2"
        caches.clear()


def _recording(forward, index, seen):
    def run(hidden_states, *args, **kwargs):
        if seen:
            seen[-1].append((index, hidden_states.shape[1]))
        return forward(hidden_states, *args, **kwargs)

    return run


def test_random_prompts_avoid_special_ids():
    tok = tiny_tokenizer()
    a, b = random_prompts(tok, 320, 3, 50, seed=1), random_prompts(tok, 320, 3, 50, seed=1)
    assert [p.ids for p in a] == [p.ids for p in b] != [p.ids for p in random_prompts(tok, 320, 3, 50, seed=2)]
    ids = {i for p in a for i in p.ids}
    assert len(a) == 3 and all(len(p.ids) == 50 for p in a)
    assert not ids & set(tok.all_special_ids) and max(ids) < 320
