"""Paper 4's training: the step's loss is the CE of the parallel DMTD forward, gradients reach the thinking layers
only through cycle starts, gradient checkpointing changes nothing, per-offset metrics, the export's `config.dmtd`,
resume, the launcher method, and a test that training learns to decode late-only tokens."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from mtp_core.decoding import StopCriteria, build_decoder
from mtp_core.models.load import load_model, prepare_base_model, tiny_model, tiny_tokenizer
from mtp_core.papers.p4.cyclic import training_mask
from mtp_core.papers.p4.report import warmup_of
from mtp_core.papers.p4.settings import DMTDConfig, DMTDSpec, dmtd_config
from mtp_core.papers.p4.split import parallel_logits
from mtp_core.papers.p4.train import P4Step, encode_p4_rows, prepare_model
from mtp_core.train import MicroBatchSpec, TrainConfig, read_curves, train
from mtp_core.train.loop import StepContext
from mtp_core.train.sft import SFTBatches
from mtp_core.validation import load_config
from tests.conftest import REPO, tiny_spec

pytestmark = pytest.mark.usefixtures("one_thread")

ROWS = [
    {"query": f"What is {a} + {b}?", "response": f"{a} + {b} = {a + b}. The answer is: {a + b}"}
    for a, b in [(1, 2), (13, 4), (5, 26), (7, 8), (30, 1), (2, 2), (11, 11), (40, 2)]
]


def _ctx(step=0, chunk=0):
    return StepContext(step=step, chunk=chunk, micro_index=0, n_micro=1, device=torch.device("cpu"))


def _setup(cfg: DMTDConfig, arch="llama"):
    torch.manual_seed(0)
    model, tok = tiny_model(tiny_spec(arch, num_layers=6)), tiny_tokenizer()
    prepare_model(model, cfg)
    batches = SFTBatches(encode_p4_rows(ROWS, tok, cfg, "chat"), tok.pad_token_id, cfg)
    return model, tok, batches


@pytest.mark.parametrize("phase", ["row", "random"])
def test_loss_is_the_cross_entropy_of_the_parallel_forward(phase):
    """The step on packed rows equals the parallel forward (Eqs. 1-5, by hand) of every row alone, with M and the
    cycle offsets counted from the row's own first token (+ its offset under phase random)."""
    tau = 4
    cfg = DMTDConfig(encoding_layers=1, decoding_layers=2, cycle=tau, phase=phase, max_tokens=128)
    model, tok, batches = _setup(cfg)
    step = P4Step(tok, cfg)
    batch = batches.micro_batch(MicroBatchSpec(0, 1, 4, 4))
    starts = (batch["position_ids"] == 0) & (batch["rows"] >= 0)
    assert batch["input_ids"].shape[0] < 4 and (starts.nonzero()[:, 1] % tau != 0).any()  # packed, rows off the cycle
    out = step(model, batch, _ctx(chunk=1))
    offsets = step.row_offsets(4, 0, 1)
    ce, hit, j_of = [], [], []
    for r, i in enumerate(batches.order.indices(4, 4)):
        ids, start = batches.examples[i]
        off = 0 if offsets is None else int(offsets[r])
        t = torch.tensor([ids])
        logits = parallel_logits(model, cfg.spec, t, training_mask(len(ids), tau, torch.tensor([off])))[
            0, start - 1 : -1
        ]
        ce.append(torch.nn.functional.cross_entropy(logits.float(), t[0, start:], reduction="none"))
        hit.append(logits.argmax(-1) == t[0, start:])
        j_of.append((torch.arange(start - 1, len(ids) - 1) + off) % tau)
    ce, hit, j_of = torch.cat(ce), torch.cat(hit), torch.cat(j_of)
    assert torch.allclose(out.loss, ce.mean(), atol=1e-5) and out.weight == len(ce)
    for j in range(tau):  # per-offset metrics from the same logits
        s, n = out.metrics[f"ce@{j}"]
        assert n == (j_of == j).sum() and torch.allclose(s, ce[j_of == j].sum(), atol=1e-3)
        assert out.metrics[f"acc@{j}"][0] == hit[j_of == j].sum()
    if phase == "random":  # a pure function of (seed, step, chunk): resume draws what the first run drew
        assert torch.equal(step.row_offsets(4, 0, 1), offsets) and not torch.equal(
            step.row_offsets(64, 5, 0), step.row_offsets(64, 6, 0)
        )


def test_thinking_layers_learn_only_through_cycle_starts():
    """With M ≡ 0 under `add`, the thinking layers get exactly zero gradient; with the cyclical M they do not."""
    cfg = DMTDConfig(encoding_layers=1, decoding_layers=2, cycle=3, max_tokens=128)
    model, tok, batches = _setup(cfg)
    ids = torch.tensor([batches.examples[0][0]])
    thinking = [p for i in range(1, 4) for p in model.model.layers[i].parameters()]
    for never in (True, False):
        model.zero_grad()
        width = ids.shape[1]
        m = torch.zeros(width, dtype=torch.bool) if never else training_mask(width, 3)
        logits = parallel_logits(model, cfg.spec, ids, m)[:, :-1]
        torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:]).backward()
        zero = all(p.grad is None or not p.grad.any() for p in thinking)
        assert zero == never
        assert model.model.layers[0].self_attn.q_proj.weight.grad.abs().sum() > 0  # encoding layers always learn


def test_gradient_checkpointing_changes_nothing():
    cfg = DMTDConfig(encoding_layers=1, decoding_layers=2, cycle=3, max_tokens=128)
    grads, losses = [], []
    for ckpt in (False, True):
        model, tok, batches = _setup(DMTDConfig(**{**cfg.__dict__, "gradient_checkpointing": ckpt}))
        model.train()
        assert model.model.layers[2].gradient_checkpointing == ckpt
        out = P4Step(tok, cfg)(model, batches.micro_batch(MicroBatchSpec(0, 0, 0, 4)), _ctx())
        out.loss.backward()
        losses.append(out.loss.detach())
        grads.append([p.grad.clone() for p in model.parameters()])
    assert torch.allclose(losses[0], losses[1], atol=1e-6)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(*grads))


def test_frozen_embeddings_option_and_overlong_rows():
    model, tok, _ = _setup(DMTDConfig(decoding_layers=2, train_embeddings=False, max_tokens=128))
    assert not model.get_input_embeddings().weight.requires_grad
    assert model.model.layers[0].mlp.up_proj.weight.requires_grad
    short = DMTDConfig(decoding_layers=2, max_tokens=40, overlong="truncate")
    cut = encode_p4_rows(ROWS, tok, short, "chat")
    assert len(cut) == len(ROWS) and max(len(x) for x, _ in cut) == 40
    with pytest.raises(ValueError, match="no row fits max_tokens 40"):
        encode_p4_rows(ROWS, tok, DMTDConfig(decoding_layers=2, max_tokens=40, overlong="drop"), "chat")
    kept = encode_p4_rows(ROWS, tok, DMTDConfig(decoding_layers=2, max_tokens=80, overlong="drop"), "chat")
    assert len(kept) > 0 and all(len(x) <= 80 for x, _ in kept)


def test_config_errors_name_the_key():
    for bad, msg in [
        ({"cycle": 0}, "cycle"),
        ({"phase": "packed"}, "phase"),
        ({"combine": "mean"}, "combine"),
        ({"overlong": "skip"}, "overlong"),
        ({"tau": 3}, "p4.method: unknown key"),
    ]:
        with pytest.raises(ValueError, match=msg):
            DMTDConfig.from_dict(bad)
    model = tiny_model(tiny_spec("llama", num_layers=6))
    with pytest.raises(ValueError, match="p4.method: encoding_layers \\+ decoding_layers = 2 \\+ 4"):
        prepare_model(model, DMTDConfig(encoding_layers=2, decoding_layers=4))


@pytest.mark.parametrize("micro_batch_size", [1, 2])
def test_the_step_gradient_is_the_token_mean_of_the_global_batch(tmp_path, micro_batch_size):
    """Under paper 4's default weighting (its schema's), a step's gradient is that of Eq. 6's mean over every
    response token of the global batch, written by hand from the rows alone: rows of 1 and 3 times the tokens
    weigh 1:3, however the 4 rows are split into micro-batches (a mean of per-row means would weigh them 1:1)."""
    cfg = DMTDConfig(encoding_layers=1, decoding_layers=2, cycle=3, max_tokens=128)
    rows = [{"query": f"Say {w}.", "response": f"{w} " * n} for w, n in [("a", 2), ("b", 6), ("c", 3), ("d", 9)]]
    torch.manual_seed(0)
    model, tok = tiny_model(tiny_spec("llama", num_layers=6)), tiny_tokenizer()
    prepare_model(model, cfg)
    ref = copy.deepcopy(model)
    batches = SFTBatches(encode_p4_rows(rows, tok, cfg, "chat"), tok.pad_token_id, cfg)
    weighting = load_config(REPO / "config/tiny.yaml")["papers"]["p4"]["train"]["loss_weighting"]  # the schema's
    tcfg = {"max_steps": 1, "global_batch_size": 4, "micro_batch_size": micro_batch_size, "warmup_steps": 0,
            "grad_clip": 0, "checkpoint_every": 0, "progress": False, "loss_weighting": weighting,
            "precision": "fp32"}  # fmt: skip
    train(P4Step(tok, cfg), model, batches, TrainConfig.from_dict(tcfg), tmp_path / "run")
    ce = []
    for i in batches.order.indices(0, 4):
        ids, start = batches.examples[i]
        t = torch.tensor([ids])
        logits = parallel_logits(ref, cfg.spec, t, training_mask(len(ids), cfg.cycle, torch.tensor([0])))[0]
        ce.append(torch.nn.functional.cross_entropy(logits[start - 1 : -1].float(), t[0, start:], reduction="none"))
    assert len({len(c) for c in ce}) == 4  # rows of different lengths
    torch.cat(ce).mean().backward()
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters(), strict=True):
        if q.grad is not None:
            torch.testing.assert_close(p.grad, q.grad, atol=1e-6, rtol=1e-4, msg=name)


def test_training_learns_exports_and_resumes(tmp_path):
    """A few steps teach the late-only offsets (their CE falls), the export records the split and decodes with
    the defaults it carries, and a run killed half way resumes to the same weights."""
    cfg = DMTDConfig(encoding_layers=0, decoding_layers=2, cycle=3, max_tokens=128, phase="random", seed=1)
    tcfg = {
        "max_steps": 8,
        "global_batch_size": 4,
        "micro_batch_size": 2,
        "lr": 3e-3,
        "warmup_steps": 1,
        "checkpoint_every": 1,
        "progress": False,
    }
    model, tok, batches = _setup(cfg)
    step = P4Step(tok, cfg)
    probe = batches.micro_batch(MicroBatchSpec(0, 0, 0, 8))
    with torch.no_grad():
        before = step(model, probe, _ctx()).metrics
    train(step, model, batches, TrainConfig.from_dict(tcfg), tmp_path / "ref")
    with torch.no_grad():
        after = step(model, probe, _ctx()).metrics
    for j in (1, 2):  # late-only predictions
        assert after[f"ce@{j}"][0] / after[f"ce@{j}"][1] < before[f"ce@{j}"][0] / before[f"ce@{j}"][1] - 0.5
    again, _, _ = _setup(cfg)
    train(P4Step(tok, cfg), again, batches, TrainConfig.from_dict({**tcfg, "max_steps": 4}), tmp_path / "cut")
    again, _, _ = _setup(cfg)
    train(P4Step(tok, cfg), again, batches, TrainConfig.from_dict(tcfg), tmp_path / "cut")
    for a, b in zip(model.state_dict().values(), again.state_dict().values()):
        assert torch.equal(a, b)
    exported = tmp_path / "ref" / "model"
    saved = json.loads((exported / "config.json").read_text())["dmtd"]
    assert saved == {"encoding_layers": 0, "decoding_layers": 2, "combine": "add", "cycle": 3, "version": 1}
    loaded = load_model(tiny_spec("llama", num_layers=6), checkpoint=exported)
    assert dmtd_config(loaded.model)["cycle"] == 3 and DMTDSpec.from_model(loaded.model) == cfg.spec
    dec = build_decoder("dmtd", loaded.model, loaded.tokenizer)
    assert dec.tau == 3 and dec.describe()["params"]["decoding_layers"] == 2
    assert len(dec.generate([loaded.encode("What is 2 + 3?")], 6, StopCriteria())[0].tokens) == 6


def _launch_settings(tmp_path, rows, p4, train):
    """Settings of method `p4` on a tiny Qwen3 (plain template: byte-level tokens, 1 per character) and `rows`."""
    spec = tiny_spec("qwen3", num_layers=4, chat_template=False)
    base = tmp_path / "base"
    if not base.exists():
        prepare_base_model(spec, base)
    data = tmp_path / f"train-{len(rows)}.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {"model": spec, "base_dir": str(base), "data": str(data), "p4": p4, "train": train}


def test_p4_method_through_the_launcher(tmp_path):
    from mtp_core.train.launch import launch

    settings = _launch_settings(
        tmp_path,
        ROWS,
        {"max_tokens": 64, "decoding_layers": 1, "cycle": 2},
        {"max_steps": 2, "global_batch_size": 2, "micro_batch_size": 2, "warmup_steps": 0, "progress": False},
    )
    res = launch(tmp_path / "run" / "train.json", "p4", settings, {"cluster": "debug", "threads": 1})
    assert res["steps"] == 2
    cfg = json.loads((tmp_path / "run" / "model" / "config.json").read_text())
    assert cfg["dmtd"]["cycle"] == 2 and cfg["dmtd"]["decoding_layers"] == 1
    with pytest.raises(ValueError, match="p4.method: unknown key"):
        launch(tmp_path / "bad" / "train.json", "p4", {**settings, "p4": {"tau": 3}}, {"cluster": "debug"})


def test_epochs_give_the_steps_of_the_rows_kept(tmp_path):
    """`method.epochs` trains ceil(epochs x kept rows / global batch) steps, the rows counted after the overlong
    policy, with `warmup_ratio` of them warming up; the launcher sees no step count until the job has one. By hand:
    7 short rows (< 40 tokens) and 3 rows of 300 characters (> 300 tokens) at max_tokens 128, 2 rows per step."""
    from mtp_core.train.launch import LaunchError, launch

    short = [{"query": f"{a} + {a}?", "response": f"{2 * a}."} for a in range(7)]
    rows = short[:3] + [{"query": "Spell it.", "response": "x" * 300}] * 3 + short[3:]
    train = {"global_batch_size": 2, "micro_batch_size": 2, "lr": 1e-3, "progress": False}
    p4 = {"max_tokens": 128, "decoding_layers": 1, "cycle": 2, "overlong": "drop", "warmup_ratio": 0.3}
    cases = [  # (epochs, overlong, steps = ceil(epochs x rows / 2), warm-up = ceil(0.3 x steps))
        (1, "drop", 4, 2),  # 7 rows kept
        (2, "drop", 7, 3),  # the stream runs on into the second epoch: not 2 x ceil(7 / 2)
        (0.5, "truncate", 3, 1),  # 10 rows kept (truncated, not dropped)
    ]
    for i, (epochs, overlong, steps, warmup) in enumerate(cases):
        settings = _launch_settings(tmp_path, rows, {**p4, "epochs": epochs, "overlong": overlong}, train)
        res = launch(tmp_path / f"run{i}" / "train.json", "p4", settings, {"cluster": "debug", "threads": 1})
        summary = json.loads((tmp_path / f"run{i}" / "train_summary.json").read_text())
        assert res["steps"] == summary["config"]["max_steps"] == steps, (epochs, overlong)
        assert warmup_of(tmp_path / f"run{i}" / "train_summary.json") == warmup  # what Figure 5 skips
        lrs = [float(r["lr"]) for r in read_curves(tmp_path / f"run{i}" / "curves.csv")]
        assert len(lrs) == steps and lrs.index(max(lrs)) == warmup - 1  # constant after the warm-up
        assert all(a < b for a, b in zip(lrs[:warmup], lrs[1:warmup]))
    no_ratio = _launch_settings(tmp_path, rows, {**p4, "epochs": 1, "warmup_ratio": None}, train)
    with pytest.raises(LaunchError, match="method.epochs 1 of 7 rows: a warm-up of 2000 steps > the run's 4 steps"):
        launch(tmp_path / "long-warmup" / "train.json", "p4", no_ratio, {"cluster": "debug", "threads": 1})
    both = _launch_settings(tmp_path, rows, {**p4, "epochs": 1}, {**train, "max_steps": 3})
    with pytest.raises(ValueError, match=r"p4 settings: set train.max_steps \(3\) or method.epochs \(1\), not both"):
        launch(tmp_path / "both" / "train.json", "p4", both, {"cluster": "debug"})
