"""Paper 4's training under torch.distributed on CPU (gloo, 2 forked ranks, `ranks.run_ranks`), as the paper config
runs it (FSDP2, gradient checkpointing, bf16): DDP and FSDP2 give the loss curve, the per-offset metrics and the
exported weights (with `config.dmtd`) of one process at the same global batch, for a split whose mixing hook sits
on a decoder layer (FSDP2 unit) and one whose hook sits on the final norm (the root unit); an FSDP2 run killed half
way resumes to the uninterrupted run; and the rehearsal's path (2 local tasks of the submitit launcher, a tiny Qwen3
declared bfloat16, `fsdp_param_dtype: bfloat16`, `fsdp_reduce_dtype: float32`, `precision: bf16`) trains float32
master weights and exports a checkpoint the `dmtd` decoder runs."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from mtp_core.models.load import LoadedModel, load_model, prepare_base_model, tiny_model, tiny_tokenizer
from mtp_core.papers.p4.train import train_p4
from mtp_core.train import LocalDist
from tests.conftest import tiny_spec
from tests.unit.papers.p4.test_p4_train import ROWS
from tests.unit.ranks import TOL, curves, max_diff, run_ranks, weights_diff

pytestmark = pytest.mark.usefixtures("one_thread")

TRAIN = {
    "max_steps": 4,
    "global_batch_size": 4,
    "micro_batch_size": 1,
    "lr": 3e-3,
    "warmup_steps": 1,
    "checkpoint_every": 2,
    "progress": False,
    "log_every": 0,
    "precision": "fp32",  # one and two processes agree within fp32 tolerances (`auto` is bf16 on a bf16 CPU)
}
# E1D2 of 6 layers: h_base recorded at layer 1, mixed in before layer 4; phase random draws per-row offsets from
# (seed, step, micro-batch), so a rank must name its micro-batches globally; checkpointing as the paper config
METHOD = {
    "encoding_layers": 1,
    "decoding_layers": 2,
    "cycle": 3,
    "phase": "random",
    "max_tokens": 128,
    "gradient_checkpointing": True,
    "seed": 1,
}


class Killed(Exception):
    pass


def _train(rank, world, strategy, out_dir, method=None, kill_at=None):
    from mtp_core.train import make_dist

    dist_obj = make_dist(strategy) if world > 1 else LocalDist()
    model, tok = tiny_model(tiny_spec("qwen3", num_layers=6)), tiny_tokenizer()
    loaded = LoadedModel("tiny-qwen3", model, tok, chat_template=True, eos_ids=(tok.eos_token_id,))

    def kill(done, row):
        if done == kill_at:
            raise Killed

    try:
        res = train_p4(loaded, ROWS, {**METHOD, **(method or {})}, TRAIN, out_dir, dist=dist_obj, callbacks=[kill])
    except Killed:
        return {"killed": True}
    state = dist_obj.model_state_dict(model)  # collective under FSDP2: the gathered full weights
    return {
        "resumed_from": res.resumed_from,
        "model_type": type(model).__name__,
        "checkpointing": [layer.gradient_checkpointing for layer in model.model.layers],
        "state": {k: v.detach().clone() for k, v in state.items()},
    }


def _export(run_dir):
    return load_file(run_dir / "model" / "model.safetensors"), json.loads(
        (run_dir / "model" / "config.json").read_text()
    )


@pytest.mark.parametrize(
    "strategy,split",
    [("ddp", {}), ("fsdp", {}), ("fsdp", {"encoding_layers": 2, "decoding_layers": 0})],
    ids=["ddp-E1D2", "fsdp-E1D2", "fsdp-E2D0"],
)
def test_two_processes_match_one(tmp_path, strategy, split):
    """Global batch 4 = 4 micro-batches of 1 row in one process, 2 per process in two: the same supervised tokens
    per step, loss, grad norm, CE and accuracy per cycle offset within float tolerance; the same trained and
    exported weights; the export records the split (E2D0: the hook on the final norm, part of FSDP2's root)."""
    one = run_ranks(1, _train, tmp_path, "none", tmp_path / "one", split)[0]
    two = run_ranks(2, _train, tmp_path, strategy, tmp_path / "two", split)
    assert two[0]["model_type"].startswith("FSDP" if strategy == "fsdp" else "Qwen3")
    assert all(one["checkpointing"]) and all(two[0]["checkpointing"])
    c1, c2 = curves(tmp_path / "one"), curves(tmp_path / "two")
    assert [(r["weight"], r["tokens"], r["sft_tokens"], r["lr"]) for r in c1] == [
        (r["weight"], r["tokens"], r["sft_tokens"], r["lr"]) for r in c2
    ]
    per_offset = tuple(k for k in c1[0] if k.startswith(("ce@", "acc@")))
    assert len(per_offset) == 2 * METHOD["cycle"]
    d_curve = max_diff(c1, c2, ("loss", "grad_norm", *per_offset))
    d_state = weights_diff(one["state"], two[0]["state"])
    (w1, cfg1), (w2, cfg2) = _export(tmp_path / "one"), _export(tmp_path / "two")
    d_export = weights_diff(w1, w2)
    print(
        f"{strategy} {split}: max |curve diff| {d_curve:.3g}, |state diff| {d_state:.3g}, |export diff| {d_export:.3g}"
    )
    assert d_curve < TOL and d_state < TOL and d_export < TOL
    assert weights_diff(w1, {k: one["state"][k] for k in w1}) == 0.0  # the export is the trained weights
    e, d = split.get("encoding_layers", 1), split.get("decoding_layers", 2)
    expected = {"encoding_layers": e, "decoding_layers": d, "combine": "add", "cycle": 3, "version": 1}
    assert cfg1["dmtd"] == cfg2["dmtd"] == expected


def test_fsdp_resume_equals_uninterrupted(tmp_path):
    """An FSDP2 run killed after step 3 (last state: step 2) resumes under FSDP2 to the uninterrupted run's weights
    and curve, bit for bit (phase random: the per-row offsets are redrawn from (seed, step, micro-batch))."""
    ref = run_ranks(2, _train, tmp_path, "fsdp", tmp_path / "ref")
    assert run_ranks(2, _train, tmp_path, "fsdp", tmp_path / "run", None, 3)[0] == {"killed": True}
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["step-00000002"]
    res = run_ranks(2, _train, tmp_path, "fsdp", tmp_path / "run")
    assert res[0]["resumed_from"] == 2
    assert weights_diff(ref[0]["state"], res[0]["state"]) == 0.0
    assert curves(tmp_path / "ref") == curves(tmp_path / "run")
    assert weights_diff(_export(tmp_path / "ref")[0], _export(tmp_path / "run")[0]) == 0.0


def test_rehearsal_fsdp_bf16_through_the_launcher(tmp_path):
    """The paper config's training path at tiny size: a tiny Qwen3 declared `dtype: bfloat16`, 2 local tasks of the
    submitit launcher, FSDP2 with bf16 parameters and float32 reductions, bf16 autocast, gradient checkpointing,
    overlong rows dropped, one epoch with a 0.1 warm-up ratio (both ranks count the same rows). It trains float32
    master weights (every weight moves at lr 1e-4; bf16 weights would keep
    most of them), agrees with one process's bf16-autocast run up to bf16 rounding, and exports a float32 checkpoint
    with `config.dmtd` that loads as declared and decodes with `dmtd`."""
    from mtp_core.decoding import StopCriteria, build_decoder
    from mtp_core.train.launch import launch

    spec = tiny_spec("qwen3", num_layers=4, dtype="bfloat16")
    base = prepare_base_model(spec, tmp_path / "base")
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    settings = {
        "model": spec,
        "base_dir": str(base),
        "data": str(data),
        "p4": {  # the rows have 62-68 tokens: 7 of 8 fit 66, so one epoch is ceil(7 / 4) = 2 steps, 1 warming up
            "max_tokens": 66,
            "overlong": "drop",
            "decoding_layers": 1,
            "cycle": 2,
            "gradient_checkpointing": True,
            "epochs": 1,
            "warmup_ratio": 0.1,
        },
        "train": {"global_batch_size": 4, "micro_batch_size": 1, "lr": 1e-4, "precision": "bf16", "progress": False},
    }
    launch(tmp_path / "one" / "train.json", "p4", settings, {"cluster": "debug", "threads": 1})
    fsdp = {"strategy": "fsdp", "fsdp_param_dtype": "bfloat16", "fsdp_reduce_dtype": "float32"}
    launcher = {"cluster": "local", "tasks_per_node": 2, "poll_s": 0.5, "progress_s": 5.0, "threads": 1, **fsdp}
    res = launch(tmp_path / "two" / "train.json", "p4", settings, launcher)
    assert res["steps"] == 2 and [(a["world_size"], a["strategy"]) for a in res["attempts"]] == [(2, "fsdp")]
    summary = json.loads((tmp_path / "two" / "train_summary.json").read_text())
    assert (summary["config"]["max_steps"], summary["config"]["warmup_steps"]) == (2, 1)
    start = {k: v.float() for k, v in load_model(spec, base_dir=base).model.state_dict().items()}
    (w1, cfg1), (w2, cfg2) = _export(tmp_path / "one"), _export(tmp_path / "two")
    assert {v.dtype for v in w2.values()} == {torch.float32} and cfg2["dmtd"] == cfg1["dmtd"]
    assert cfg2["dmtd"] == {"encoding_layers": 0, "decoding_layers": 1, "combine": "add", "cycle": 2, "version": 1}
    moved = [k for k in w2 if not torch.equal(w2[k], start[k])]
    assert moved == list(w2)
    d_curve = max_diff(curves(tmp_path / "one"), curves(tmp_path / "two"), ("loss",))
    d_export = weights_diff(w1, w2)
    print(f"fsdp bf16 params vs one process bf16 autocast: |loss diff| {d_curve:.3g}, |weight diff| {d_export:.3g}")
    assert d_curve < 2e-2 and d_export < 1e-3
    loaded = load_model(spec, checkpoint=tmp_path / "two" / "model")
    assert next(loaded.model.parameters()).dtype == torch.bfloat16
    dec = build_decoder("dmtd", loaded.model, loaded.tokenizer)
    assert dec.tau == 2 and len(dec.generate([loaded.encode("What is 2 + 3?")], 5, StopCriteria())[0].tokens) == 5
