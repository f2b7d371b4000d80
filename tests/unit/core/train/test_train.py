"""The one training loop with paper 1's step: resume == uninterrupted (bit for bit), accumulation == one big batch,
the LR schedule, parameter groups, kept exports loadable with `<MTP>`, data templates and the batch stream."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
import torch

from mtp_core.data.rows import render_example
from mtp_core.models.load import tiny_model, tiny_tokenizer
from mtp_core.papers.p1.losses import p1_loss
from mtp_core.papers.p1.mask_token import MTP_TOKEN, add_mask_token
from mtp_core.papers.p1.settings import P1Config
from mtp_core.papers.p1.train import P1Batches, P1Step, encode_examples, max_row_tokens
from mtp_core.train import (
    LocalDist,
    MicroBatchSpec,
    ShuffledOrder,
    StepOutput,
    TrainConfig,
    WarmupSchedule,
    build_optimizer,
    build_scheduler,
    param_groups,
    read_curves,
    train,
)
from mtp_core.train.curves import CurveWriter
from mtp_core.train.loop import WALL_CLOCK_COLUMNS, autocast_dtype
from mtp_core.train.optim import fused_supported
from tests.conftest import tiny_spec

pytestmark = pytest.mark.usefixtures("one_thread")


ROWS = [
    {
        "query": f"Tom has {a} apples and buys {b} more. How many now?",
        "response": f"He has {a} + {b} = {a + b} apples.\n#### {a + b}\nThe answer is: {a + b}",
    }
    for a, b in [(3, 4), (10, 7), (2, 9), (31, 5), (6, 6), (12, 1), (8, 13), (4, 40), (7, 2), (15, 15)]
]
ROWS[4] = {"query": "5?", "response": "5."}  # a short row (in the first micro-batches): ends inside the window


def _setup(p1_overrides=None, arch="llama"):
    """A fresh tiny student with <MTP>, its P1 step (teacher = copy of the initial weights) and batches."""
    model, tok = tiny_model(tiny_spec(arch)), tiny_tokenizer()
    mask_id = add_mask_token(model, tok, seed=0)
    cfg = P1Config.from_dict({"seq_len": 32, "k_max": 4, "seed": 1, **(p1_overrides or {})})
    encoded = encode_examples(ROWS, tok, "chat", max_row_tokens(cfg))
    step = P1Step(model, cfg, tokenizer=tok)
    batches = P1Batches(encoded, cfg, mask_id=mask_id, pad_id=tok.pad_token_id)
    return model, tok, step, batches


def _tcfg(**kw):
    base = dict(
        max_steps=6,
        global_batch_size=4,
        micro_batch_size=2,
        lr=3e-3,
        warmup_steps=2,
        checkpoint_every=2,
        keep_last=1,
        progress=False,
        log_every=0,
        precision="fp32",  # compared with fp32 objectives written by hand (`auto` is bf16 on a bf16 CPU)
    )
    return TrainConfig(**{**base, **kw})


class Killed(RuntimeError):
    pass


def _comparable(rows):
    return [{k: v for k, v in r.items() if k not in WALL_CLOCK_COLUMNS} for r in rows]


def test_resume_equals_uninterrupted(tmp_path):
    """Kill after step 3 (its CSV row written, its state not: the last state is step 2), start again: final
    weights, optimiser state and curves equal an uninterrupted run's, bit for bit. Sampled readouts make the
    run depend on the restored torch RNG as well as on the data position."""
    p1 = {"loss": {"student_readout": "sample", "prefix_weight": 0.5}}
    model, _, step, batches = _setup(p1)
    ref = train(step, model, batches, _tcfg(), tmp_path / "ref")
    ref_state = {k: v.clone() for k, v in model.state_dict().items()}

    def kill(done, row):
        if done == 3:
            raise Killed

    model2, _, step2, batches2 = _setup(p1)
    with pytest.raises(Killed):
        train(step2, model2, batches2, _tcfg(), tmp_path / "run", callbacks=[kill])
    assert [r["step"] for r in read_curves(tmp_path / "run" / "curves.csv")] == ["1", "2", "3"]
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["step-00000002"]

    model3, _, step3, batches3 = _setup(p1)  # a new process: base weights, fresh teacher copy
    res = train(step3, model3, batches3, _tcfg(), tmp_path / "run")
    assert res.resumed_from == 2 and res.tokens_total == ref.tokens_total
    state = model3.state_dict()
    assert state.keys() == ref_state.keys()
    for k in ref_state:
        assert torch.equal(state[k], ref_state[k]), k
    assert _comparable(read_curves(tmp_path / "run" / "curves.csv")) == _comparable(
        read_curves(tmp_path / "ref" / "curves.csv")
    )
    # the final training states match too (optimiser moments, scheduler)
    a = torch.load(tmp_path / "ref" / "checkpoints" / "step-00000006" / "state.pt", weights_only=True)
    b = torch.load(tmp_path / "run" / "checkpoints" / "step-00000006" / "state.pt", weights_only=True)
    assert a["scheduler"] == b["scheduler"]
    for sa, sb in zip(a["optimizer"]["state"].values(), b["optimizer"]["state"].values(), strict=True):
        assert all(torch.equal(sa[n], sb[n]) for n in sa)
    # a later call with the same max_steps has nothing left to do
    again = train(step3, model3, batches3, _tcfg(), tmp_path / "run")
    assert again.resumed_from == 6 and len(read_curves(tmp_path / "run" / "curves.csv")) == 6


@pytest.mark.parametrize("weighting", ["micro_batch", "tokens"])
def test_step_gradient_is_the_configured_mean_of_its_micro_batches(tmp_path, weighting):
    """One step over 4 micro-batches of 1 row, each with its own (k, offset) draw and a prefix loss, gives the
    gradient of the objective written by hand from the same micro-batches: the mean of their mean losses
    (`micro_batch`, the official `loss / grad_accum`) or their losses weighted by supervised slots (`tokens`)."""
    model, _, step, batches = _setup({"seq_len": 48, "loss": {"prefix_weight": 0.3}})
    ref = copy.deepcopy(model)  # the initial weights; the step's teacher is a copy of them too
    cfg = _tcfg(
        max_steps=1, global_batch_size=4, micro_batch_size=1, checkpoint_every=0, grad_clip=0, loss_weighting=weighting
    )
    train(step, model, batches, cfg, tmp_path / "m")
    micro = [batches.micro_batch(MicroBatchSpec(0, c, c, 1)) for c in range(4)]
    assert len({(b.k, b.offset) for b in micro}) > 1  # the micro-batches really draw differently
    outs = [p1_loss(ref, step.teacher, b, step.cfg.loss) for b in micro]
    assert len({o.weight for o in outs}) > 1  # and carry different numbers of supervised slots
    if weighting == "micro_batch":
        loss = sum(o.loss for o in outs) / len(outs)
    else:
        loss = sum(o.loss * o.weight for o in outs) / sum(o.weight for o in outs)
    loss.backward()
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-6, rtol=1e-4, msg=name)


class _ToyStep:
    """A generic step function: mean squared error of a linear model (the loop knows nothing of P1)."""

    metric_names = ["mse"]

    def __call__(self, model, batch, ctx):
        x, y = batch
        err = (model(x).squeeze(-1) - y) ** 2
        return StepOutput(
            loss=err.mean(), weight=float(len(y)), metrics={"mse": (err.sum().detach(), len(y))}, tokens=len(y)
        )


class _ToyData:
    def __init__(self, n=12):
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(n, 3, generator=g), torch.randn(n, generator=g)
        self.order = ShuffledOrder(n, seed=0)

    def micro_batch(self, spec):
        idx = torch.from_numpy(self.order.indices(spec.start, spec.size))
        return self.x[idx], self.y[idx]


def test_generic_step_and_micro_batch_weighting(tmp_path):
    """Any step function plugs in; `loss_weighting="micro_batch"` (official) averages micro-batch means."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 1)
    init = copy.deepcopy(lin.state_dict())
    res = train(
        _ToyStep(),
        lin,
        _ToyData(),
        _tcfg(max_steps=3, global_batch_size=6, micro_batch_size=3, checkpoint_every=0),
        tmp_path / "toy",
        export_fn=lambda m, p: None,
    )
    assert res.last_row["mse"] == pytest.approx(res.last_row["loss"]) and res.tokens_total == 18
    lin.load_state_dict(init)
    train(
        _ToyStep(),
        lin,
        _ToyData(),
        _tcfg(
            max_steps=1,
            global_batch_size=6,
            micro_batch_size=3,
            grad_clip=0,
            checkpoint_every=0,
            loss_weighting="micro_batch",
            resume=False,
        ),
        tmp_path / "toy2",
        export_fn=lambda m, p: None,
    )
    data = _ToyData()
    ref = copy.deepcopy(lin)
    ref.load_state_dict(init)
    halves = [data.micro_batch(MicroBatchSpec(0, c, 3 * c, 3)) for c in range(2)]
    loss = sum(((ref(x).squeeze(-1) - y) ** 2).mean() for x, y in halves) / 2
    loss.backward()
    torch.testing.assert_close(lin.weight.grad, ref.weight.grad)


@pytest.mark.parametrize("native", [False, True])
def test_auto_precision_autocasts_to_bf16_where_the_cpu_computes_bf16(tmp_path, monkeypatch, native):
    """`precision: auto` takes the step under bf16 autocast on a CPU with native bf16 GEMMs and in fp32 on any other
    (the summary names which): its gradient is then the bf16-autocast objective's or the fp32 one's, written by
    hand. `fp32` and `bf16` do as they say whatever the CPU."""
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: native)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 1)
    ref = copy.deepcopy(lin)
    cfg = _tcfg(max_steps=1, global_batch_size=6, micro_batch_size=6, grad_clip=0, checkpoint_every=0,
                precision="auto")  # fmt: skip
    train(_ToyStep(), lin, _ToyData(), cfg, tmp_path / "toy", export_fn=lambda m, p: None)
    summary = json.loads((tmp_path / "toy" / "train_summary.json").read_text())
    assert summary["autocast"] == ("bfloat16" if native else None)
    x, y = _ToyData().micro_batch(MicroBatchSpec(0, 0, 0, 6))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=native):
        out = ref(x)
    ((out.float().squeeze(-1) - y) ** 2).mean().backward()
    torch.testing.assert_close(lin.weight.grad, ref.weight.grad, atol=0, rtol=0)
    cpu = torch.device("cpu")
    assert autocast_dtype("fp32", cpu) is None and autocast_dtype("bf16", cpu) == torch.bfloat16


@pytest.mark.parametrize("began_native", [True, False])
def test_auto_precision_resumes_under_the_autocast_it_began_with(tmp_path, monkeypatch, began_native):
    """A run under `auto` killed on a machine of one bf16 capability and resumed on one of the other ends with the
    weights of a run never killed on the first machine, bit for bit, and its summary names the first's autocast."""

    def on(native):
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: native)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)

    def run(out, callbacks=()):
        torch.manual_seed(0)
        lin = torch.nn.Linear(3, 1)
        cfg = _tcfg(max_steps=4, global_batch_size=4, micro_batch_size=4, checkpoint_every=1, precision="auto")
        train(_ToyStep(), lin, _ToyData(), cfg, tmp_path / out, export_fn=lambda m, p: None, callbacks=callbacks)
        return lin

    def kill(done, row):
        if done == 2:
            raise Killed

    on(began_native)
    ref = run("ref")
    with pytest.raises(Killed):
        run("run", [kill])
    on(not began_native)
    resumed = run("run")
    summary = json.loads((tmp_path / "run" / "train_summary.json").read_text())
    assert summary["resumed_from"] == 2 and summary["autocast"] == ("bfloat16" if began_native else None)
    assert torch.equal(resumed.weight, ref.weight) and torch.equal(resumed.bias, ref.bias)
    # a whole run on the second machine ends elsewhere: the test can tell the two autocasts apart
    assert not torch.equal(run("other").weight, ref.weight)


def test_schedule_values():
    s = WarmupSchedule(4)
    assert [s(i) for i in range(7)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0, 1.0]
    z = WarmupSchedule(4, warmup_from_zero=True)  # official: LR 0 at the first step
    assert [z(i) for i in range(6)] == [0.0, 0.25, 0.5, 0.75, 1.0, 1.0]
    c = WarmupSchedule(2, "cosine", max_steps=12, min_lr_ratio=0.1)
    assert c(2) == pytest.approx(1.0) and c(7) == pytest.approx(0.55) and c(12) == pytest.approx(0.1)
    assert WarmupSchedule(0, "linear", max_steps=10)(5) == pytest.approx(0.5)
    # WSD (paper 2): warm-up, stable, then a cosine to min over the last decay_fraction of the steps
    w = WarmupSchedule(2, "wsd", max_steps=20, min_lr_ratio=0.0, decay_fraction=0.2)
    assert [w(i) for i in range(2)] == [0.5, 1.0] and all(w(i) == 1.0 for i in range(2, 16))
    assert w(16) == 1.0 and w(18) == pytest.approx(0.5) and w(19) == pytest.approx(0.5 * (1 + math.cos(0.75 * math.pi)))
    assert w(20) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="decay_fraction"):
        TrainConfig(max_steps=10, schedule="wsd", decay_fraction=0.0)
    # the LR the optimiser actually uses at each step, through LambdaLR and its saved state
    lin = torch.nn.Linear(2, 2)
    cfg = TrainConfig(max_steps=10, lr=1e-3, warmup_steps=4)
    opt = build_optimizer(lin, cfg)
    sched = build_scheduler(opt, cfg)
    lrs = []
    for _ in range(6):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3, 1e-3])
    assert sched.state_dict()["lr_lambdas"][0]["warmup_steps"] == 4


def test_param_groups_and_optimizer_defaults():
    model = tiny_model(tiny_spec("qwen3"))
    groups = param_groups(model, 0.1)
    decay, no_decay = groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.ndim >= 2 for p in decay["params"]) and all(p.ndim == 1 for p in no_decay["params"])
    n_unique = len({id(p) for p in model.parameters()})
    assert len(decay["params"]) + len(no_decay["params"]) == n_unique  # tied embeddings counted once
    opt = build_optimizer(model, TrainConfig(max_steps=1))
    assert opt.defaults["betas"] == (0.9, 0.95) and opt.defaults["lr"] == 1e-5
    assert opt.defaults["fused"] is True  # CPU float parameters: the fused kernel
    assert not build_optimizer(model, TrainConfig(max_steps=1, fused=False)).defaults["fused"]
    assert not fused_supported([torch.zeros(2, device="meta")])  # no fused kernel there: the default AdamW
    # one step of each from the same state agrees to float rounding
    ref = copy.deepcopy(model)
    for m in (model, ref):
        for i, p in enumerate(m.parameters()):
            p.grad = torch.full_like(p, 1e-3 * (i % 7 - 3))
    for fused, m in ((True, model), (False, ref)):
        build_optimizer(m, TrainConfig(max_steps=1, lr=1e-2, fused=fused)).step()
    for a, b in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    assert len(param_groups(model, 0.1, decay_norms_and_biases=True)) == 1
    with pytest.raises(ValueError, match="multiple"):
        TrainConfig(max_steps=1, global_batch_size=10, micro_batch_size=4)
    with pytest.raises(ValueError, match="unknown key"):
        TrainConfig.from_dict({"max_steps": 1, "warmup": 3})
    with pytest.raises(ValueError, match="world_size"):
        TrainConfig(max_steps=1, global_batch_size=8, micro_batch_size=4).accumulation(world_size=4)


def test_kept_exports_load_as_hf_students_with_mask_token(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tok, step, batches = _setup()
    mask_id = tok.convert_tokens_to_ids(MTP_TOKEN)
    seen = {}

    def grab(done, row):  # the CSV is flushed as the run goes
        seen[done] = len(read_curves(tmp_path / "out" / "curves.csv"))

    train(
        step,
        model,
        batches,
        _tcfg(max_steps=4, save_steps=(0, 2), checkpoint_every=1, keep_last=2),
        tmp_path / "out",
        callbacks=[grab],
    )
    assert seen == {1: 1, 2: 2, 3: 3, 4: 4}
    out = tmp_path / "out"
    assert sorted(p.name for p in (out / "exports").iterdir()) == ["step-00000000", "step-00000002"]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-00000003", "step-00000004"]
    for d in (out / "exports" / "step-00000000", out / "exports" / "step-00000002", out / "model"):
        loaded = AutoModelForCausalLM.from_pretrained(d)
        t2 = AutoTokenizer.from_pretrained(d)
        assert t2.convert_tokens_to_ids(MTP_TOKEN) == mask_id and MTP_TOKEN in t2.all_special_tokens
        assert loaded.config.mtp_mask_token_id == mask_id
    final = AutoModelForCausalLM.from_pretrained(out / "model")
    for (n, p), (_, q) in zip(model.named_parameters(), final.named_parameters(), strict=True):
        assert torch.equal(p.detach().cpu(), q.detach()), n
    step0 = AutoModelForCausalLM.from_pretrained(out / "exports" / "step-00000000")
    for p, q in zip(step.teacher.parameters(), step0.parameters(), strict=True):
        assert torch.equal(p, q)  # step 0 = the initial weights = the teacher
    # the teacher stayed frozen; a checkpoint refuses a different teacher
    with pytest.raises(ValueError, match="teacher differs"):
        step.load_state_dict({"teacher_fingerprint": step.state_dict()["teacher_fingerprint"] + 1.0})


def test_templates_lengths_and_stream():
    tok = tiny_tokenizer()
    row = {"query": "Q?", "response": "A."}
    assert render_example(row, tok, "chat") == "<|im_start|>user\nQ?<|im_end|>\n<|im_start|>assistant\nA.<|im_end|>\n"
    assert render_example(row, tok, "plain") == "Q?\n\nA."  # no BOS token: nothing prepended
    tok_bos = copy.deepcopy(tok)
    tok_bos.bos_token = "<|endoftext|>"
    assert render_example(row, tok_bos, "plain") == "<|endoftext|>Q?\n\nA."
    enc = encode_examples([row], tok_bos, "plain", 8, pad_id=2)
    assert enc.tokens[0, 0].item() == tok_bos.bos_token_id and enc.lengths.tolist() == [1 + 2 + 2 + 2]
    assert enc.response_start.tolist() == [1 + 2 + 2]  # after BOS, "Q?" and "\n\n"
    enc = encode_examples([row, {"query": "x" * 50, "response": "y"}], tok, "chat", 20)
    ids, lens = enc.tokens, enc.lengths
    assert ids.shape == (2, 20) and lens[1] > 20  # true length kept past truncation: no false end
    assert (ids[0, lens[0] :] == tok.pad_token_id).all()
    # the chat response starts after "<|im_start|>user\nQ?<|im_end|>\n<|im_start|>assistant\n" (1+5+2+1+1+1+10+1)
    assert enc.response_start[0].item() == len(tok("<|im_start|>user\nQ?<|im_end|>\n<|im_start|>assistant\n").input_ids)
    cfg = P1Config()
    assert cfg.num_regions == 5 and max_row_tokens(cfg) == 157  # official train_block_size 156 + 1
    # the stream: each epoch a permutation, a pure function of the position
    order = ShuffledOrder(7, seed=3)
    a = order.indices(0, 21)
    assert all(sorted(a[i : i + 7]) == list(range(7)) for i in (0, 7, 14))
    assert np.array_equal(ShuffledOrder(7, seed=3).indices(5, 9), a[5:14])
    # P1 micro-batches: (k, offset) per (step, chunk), deterministic
    _, _, _, batches = _setup()
    b1 = batches.micro_batch(MicroBatchSpec(3, 1, 14, 2))
    b2 = batches.micro_batch(MicroBatchSpec(3, 1, 14, 2))
    assert (b1.k, b1.offset) == batches.draw(3, 1) and torch.equal(b1.input_ids, b2.input_ids)
    assert LocalDist().is_main


def test_curve_writer_truncates_on_resume(tmp_path):
    path = tmp_path / "c.csv"
    with CurveWriter(path, ["step", "loss"]) as w:
        for s in range(1, 5):
            w.write({"step": s, "loss": s / 3})
    with CurveWriter(path, ["step", "loss"], resume_step=2) as w:
        w.write({"step": 3, "loss": 9.0})
    rows = read_curves(path)
    assert [r["step"] for r in rows] == ["1", "2", "3"] and float(rows[1]["loss"]) == 2 / 3 and rows[2]["loss"] == "9.0"


def test_ddp_hook_single_process_equals_local(tmp_path):
    """The DDP hook (wrap, no_sync during accumulation, all-reduce of weights and metrics) in a one-process gloo
    group gives the single-process result: the loop is ready for the launcher."""
    import torch.distributed as dist

    from mtp_core.train import DDPDist

    results = {}
    for name in ("local", "ddp"):
        model, _, step, batches = _setup()
        cfg = _tcfg(max_steps=2, checkpoint_every=0)
        if name == "ddp":
            dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
            try:
                train(step, model, batches, cfg, tmp_path / name, dist=DDPDist())
            finally:
                dist.destroy_process_group()
        else:
            train(step, model, batches, cfg, tmp_path / name)
        results[name] = model.state_dict()
    for k, v in results["local"].items():
        torch.testing.assert_close(results["ddp"][k], v, rtol=0, atol=1e-7)
    assert _comparable(read_curves(tmp_path / "ddp" / "curves.csv")) == _comparable(
        read_curves(tmp_path / "local" / "curves.csv")
    )


def test_a_model_loaded_in_bf16_trains_float32_master_weights(tmp_path):
    """`param_dtype` float32 (the default): a model loaded in bf16 (the paper scale's declared dtype) trains exactly
    as its float32 upcast does; bfloat16 keeps bf16 weights, whose small updates round away; buffers keep their
    dtype either way."""
    runs = {}
    for name, upcast, param_dtype in [
        ("bf16-in", False, "float32"),
        ("fp32-in", True, "float32"),
        ("bf16", False, "bfloat16"),
    ]:
        model, _, step, batches = _setup()
        model.to(torch.bfloat16)
        if upcast:
            for p in model.parameters():
                p.data = p.data.float()  # the reference: the same bf16 values, held in float32 by hand
        buffers = {n: b.dtype for n, b in model.named_buffers()}
        train(step, model, batches, _tcfg(max_steps=2, lr=1e-5, param_dtype=param_dtype), tmp_path / name)
        assert {n: b.dtype for n, b in model.named_buffers()} == buffers, name
        runs[name] = {n: p.detach().clone() for n, p in model.named_parameters()}
    assert {p.dtype for p in runs["bf16-in"].values()} == {torch.float32}
    assert all(torch.equal(runs["bf16-in"][n], runs["fp32-in"][n]) for n in runs["fp32-in"])
    assert {p.dtype for p in runs["bf16"].values()} == {torch.bfloat16}
    moved = [n for n, p in runs["bf16-in"].items() if not torch.equal(p, p.bfloat16().float())]
    assert moved, "float32 masters hold updates finer than bf16"


def test_a_run_killed_while_exporting_a_step_exports_it_on_resume(tmp_path):
    """An export step that is also a checkpoint step (paper 1: every 10,000th, checkpoints every 1,000): the
    export comes first, so a run killed while writing it has not saved that step's state, redoes the step on
    resume and writes the export; the weights equal an uninterrupted run's."""

    class Killed(Exception):
        pass

    def run(out, export_fn):
        torch.manual_seed(0)
        lin = torch.nn.Linear(3, 1)
        cfg = TrainConfig(max_steps=4, global_batch_size=2, micro_batch_size=2, lr=1e-2, warmup_steps=0,
                          checkpoint_every=2, save_steps=(2,), progress=False)  # fmt: skip
        return lin, train(_ToyStep(), lin, _ToyData(), cfg, out, export_fn=export_fn)

    def save(m, p):
        p.mkdir(parents=True, exist_ok=True)
        torch.save(m.state_dict(), p / "w.pt")

    def dies_at_step_2(m, p):
        if p.name == "step-00000002":
            raise Killed
        save(m, p)

    with pytest.raises(Killed):
        run(tmp_path / "cut", dies_at_step_2)
    lin, res = run(tmp_path / "cut", save)
    assert res.resumed_from == 0 and (tmp_path / "cut" / "exports" / "step-00000002" / "w.pt").exists()
    ref, _ = run(tmp_path / "ref", save)
    for a, b in zip(lin.state_dict().values(), ref.state_dict().values()):
        assert torch.equal(a, b)
