"""The training loop under torch.distributed on CPU (gloo): DDP and FSDP2 with 2 processes give the loss curve and
weights of 1 process at the same global batch; FSDP2 shards the frozen teacher's layers (its embedding and lm_head
stay whole on every rank), which never receive a gradient; checkpoints resume bit for bit under FSDP2 and keep the
single-process layout.

Ranks are forked from the test process (`ranks.run_ranks`). The launcher's own path (submitit's
TorchDistributedEnvironment in 2 local tasks) is covered in test_launch.py; paper 2's model under both strategies in
test_p2_distributed.py.
"""

from __future__ import annotations

import pytest
import torch

from mtp_core.train import LocalDist, TrainConfig, train
from tests.unit.core.train.test_train import Killed, _setup
from tests.unit.ranks import TOL, curves, max_diff, run_ranks, weights_diff

pytestmark = pytest.mark.usefixtures("one_thread")


def _cfg(**kw):
    base = dict(
        max_steps=5,
        global_batch_size=4,
        micro_batch_size=1,
        lr=3e-3,
        warmup_steps=2,
        checkpoint_every=2,
        keep_last=1,
        progress=False,
        log_every=0,
        grad_clip=1.0,
    )
    return TrainConfig(**{**base, **kw})


def _train_p1(rank, world, strategy, out_dir, cfg_kw, kill_at=None):
    from mtp_core.train import make_dist

    model, _, step, batches = _setup()
    dist_obj = make_dist(strategy) if world > 1 or strategy != "none" else LocalDist()
    teacher_fp = step.state_dict()["teacher_fingerprint"]
    callbacks = []
    if kill_at:

        def kill(done, row):
            if done == kill_at:
                raise Killed

        callbacks.append(kill)
    try:
        res = train(step, model, batches, _cfg(**cfg_kw), out_dir, dist=dist_obj, callbacks=callbacks)
    except Killed:
        return {"killed": True}
    info = {
        "teacher_layer_types": sorted({type(m).__name__ for m in step.teacher.model.layers}),
        "teacher_layer_param_types": sorted({type(p).__name__ for p in step.teacher.model.layers.parameters()}),
        "teacher_embedding_type": type(step.teacher.get_input_embeddings().weight).__name__,
        "teacher_grads": [p.grad is not None for p in step.teacher.parameters()],
        "teacher_requires_grad": any(p.requires_grad for p in step.teacher.parameters()),
        "model_type": type(model).__name__,
        "resumed_from": res.resumed_from,
    }
    if strategy == "fsdp":
        full = dist_obj.model_state_dict(model)  # collective
        info["teacher_full"] = dist_obj.model_state_dict(step.teacher)
        from mtp_core.papers.p1.train import fingerprint

        if rank == 0:
            t = _setup()[2].teacher  # a fresh teacher of the same base weights
            t.load_state_dict(info["teacher_full"])
            info["teacher_fingerprint_after"] = fingerprint(t)
    else:
        full = dist_obj.unwrap(model).state_dict()
    info["state"] = {k: v.detach().clone() for k, v in full.items()}
    info["teacher_fingerprint"] = teacher_fp
    return info


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_two_processes_match_one(tmp_path, strategy, record_property):
    """Global batch 4 = 4 micro-batches of 1 row in one process, 2 per process in two: same curve, same weights.
    The token counts (weights) of each step must be identical; loss and grad norm within float tolerance. In fp32:
    under bf16 autocast, FSDP2's reduce-scatter sums the gradients in another order than one process (last-bit
    differences), and once AdamW has moved the weights by them, a weight that lands on the other side of a bf16
    rounding boundary is cast one bf16 step apart (measured on an Intel Xeon with AMX: the losses equal for 3 steps,
    then 4.2792 against 4.2787 at step 4); the bf16 runs' resume is checked bit for bit below."""
    one = run_ranks(1, _train_p1, tmp_path, "none", tmp_path / "one", {"precision": "fp32"})[0]
    two = run_ranks(2, _train_p1, tmp_path, strategy, tmp_path / "two", {"precision": "fp32"})
    c1, c2 = curves(tmp_path / "one"), curves(tmp_path / "two")
    assert [(r["weight"], r["tokens"], r["lr"]) for r in c1] == [(r["weight"], r["tokens"], r["lr"]) for r in c2]
    d_loss = max_diff(c1, c2, ("loss",))
    d_curve = max_diff(c1, c2, ("loss", "grad_norm") + tuple(k for k in c1[0] if k.startswith("acc")))
    d_weights = weights_diff(one["state"], two[0]["state"])
    record_property("max_abs_loss_diff", d_loss)
    record_property("max_abs_weight_diff", d_weights)
    print(
        f"{strategy}: 2 vs 1 process over {len(c1)} steps: max |loss diff| {d_loss:.3g} (loss ~{c1[0]['loss']:.2f}), "
        f"max |loss, grad-norm, acc diff| {d_curve:.3g}, max |weight diff| {d_weights:.3g}"
    )
    assert d_curve < TOL and d_weights < TOL
    assert (tmp_path / "two" / "model" / "model.safetensors").exists()
    if strategy == "fsdp":
        for r in two:  # the teacher: its layers sharded, its embedding whole; frozen, no gradient ever, unchanged
            assert all(t.startswith("FSDP") for t in r["teacher_layer_types"])
            assert r["teacher_layer_param_types"] == ["DTensor"] and r["teacher_embedding_type"] == "Parameter"
            assert not any(r["teacher_grads"]) and not r["teacher_requires_grad"]
            assert r["model_type"].startswith("FSDP")
        assert two[0]["teacher_fingerprint_after"] == pytest.approx(two[0]["teacher_fingerprint"], rel=1e-12)
        # the exported HF model (gathered from the shards) equals the trained weights
        from transformers import AutoModelForCausalLM

        exported = AutoModelForCausalLM.from_pretrained(tmp_path / "two" / "model").state_dict()
        for k, v in exported.items():
            assert torch.equal(v, two[0]["state"][k]), k


def test_fsdp_resume_is_bit_exact_and_checkpoints_keep_the_local_layout(tmp_path):
    """Kill an FSDP2 run after step 3 (last state: step 2), resume it under FSDP2: same weights and curve as the
    uninterrupted FSDP2 run, bit for bit. Its checkpoint has the single-process layout (same keys, optimiser state
    indexed like `optimizer.state_dict()`) and a single process resumes from it."""
    ref = run_ranks(2, _train_p1, tmp_path, "fsdp", tmp_path / "ref", {})
    killed = run_ranks(2, _train_p1, tmp_path, "fsdp", tmp_path / "run", {}, 3)
    assert killed[0] == {"killed": True}
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["step-00000002"]
    res = run_ranks(2, _train_p1, tmp_path, "fsdp", tmp_path / "run", {})
    assert res[0]["resumed_from"] == 2
    assert weights_diff(ref[0]["state"], res[0]["state"]) == 0.0
    assert curves(tmp_path / "ref") == curves(tmp_path / "run")

    fsdp_state = torch.load(tmp_path / "run" / "checkpoints" / "step-00000005" / "state.pt", weights_only=True)
    local = run_ranks(1, _train_p1, tmp_path, "none", tmp_path / "local", {"max_steps": 2})
    assert local[0]["resumed_from"] == 0
    local_state = torch.load(tmp_path / "local" / "checkpoints" / "step-00000002" / "state.pt", weights_only=True)
    assert fsdp_state["model"].keys() == local_state["model"].keys()
    assert fsdp_state["optimizer"]["state"].keys() == local_state["optimizer"]["state"].keys()
    assert [g["params"] for g in fsdp_state["optimizer"]["param_groups"]] == [
        g["params"] for g in local_state["optimizer"]["param_groups"]
    ]
    for i, s in local_state["optimizer"]["state"].items():
        assert fsdp_state["optimizer"]["state"][i]["exp_avg"].shape == s["exp_avg"].shape
    # one process continues the FSDP2 run from its step-5 state
    cont = run_ranks(1, _train_p1, tmp_path, "none", tmp_path / "run", {"max_steps": 6})
    assert cont[0]["resumed_from"] == 5
