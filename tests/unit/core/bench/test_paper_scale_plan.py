"""benchmarks/paper_scale_plan.py (+ paper_scale_terms.py): the analytic memory and throughput plan of the
paper-scale trainings. Parameter counts of tiny Llama / Qwen3 / GLM-4-MoE models against formulas written out here,
each memory, logit, activation and FLOP term against hand-computed examples, and the paper config's world sizes,
micro-batches, heads, teacher and checkpointing as the plan reads them."""

from __future__ import annotations

import copy
import importlib.util
import sys

import pytest
import torch

from mtp_core.config.settings import ConfigError
from mtp_core.validation import load_config
from tests.conftest import REPO


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / f"benchmarks/{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # the plan imports the terms by this name
    spec.loader.exec_module(module)
    return module


terms = _load("paper_scale_terms")
plan = _load("paper_scale_plan")

GIB = 2**30


@pytest.fixture(scope="module")
def config() -> dict:
    return load_config(REPO / "config/paper.yaml")


@pytest.fixture(scope="module")
def runs(config) -> dict[str, object]:
    return {(t.paper, t.run): t for t in plan.trainings(config)}


# ------------------------------------------------------------------------------------------ parameter counts


def test_llama_parameter_count_by_hand():
    V, h, L, a, g, d, I = 100, 64, 3, 4, 2, 16, 96  # noqa: E741
    model = terms.meta_model(
        "llama", hidden_size=h, num_hidden_layers=L, num_attention_heads=a, num_key_value_heads=g, head_dim=d,
        intermediate_size=I, vocab_size=V, tie_word_embeddings=False,
    )  # fmt: skip
    # per layer: q (h x a d), k and v (h x g d each), o (a d x h), gate / up / down (3 h I), two RMSNorms (h each)
    layer = h * a * d + 2 * h * g * d + a * d * h + 3 * h * I + 2 * h
    total = V * h + L * layer + h + V * h  # embeddings, layers, final norm, untied LM head
    n = terms.param_counts(model)
    assert (n.total, n.active, n.body, n.lm_head) == (total, total, L * layer + h, V * h)


def test_qwen3_parameter_count_by_hand_ties_the_head_once():
    V, h, L, a, g, d, I = 100, 64, 2, 4, 2, 32, 80  # noqa: E741
    model = terms.meta_model(
        "qwen3", hidden_size=h, num_hidden_layers=L, num_attention_heads=a, num_key_value_heads=g, head_dim=d,
        intermediate_size=I, vocab_size=V, tie_word_embeddings=True,
    )  # fmt: skip
    # Llama's layer plus qk-norm (a d-wide RMSNorm on q and one on k); the LM head is the embedding matrix
    layer = h * a * d + 2 * h * g * d + a * d * h + 3 * h * I + 2 * h + 2 * d
    n = terms.param_counts(model)
    assert (n.total, n.body, n.lm_head) == (V * h + L * layer + h, L * layer + h, V * h)


def _moe_config(**moe) -> dict:
    spec = {
        "source": "scratch", "arch": "glm4_moe", "tokenizer": "tok", "hidden_size": 32, "num_layers": 3,
        "num_heads": 4, "num_kv_heads": 2, "head_dim": 8, "intermediate_size": 48, "vocab_size": 100,
        "dtype": "bfloat16",
        "moe": {"num_experts": 6, "expert_hidden_size": 12, "top_k": 2, "num_shared_experts": 1, "dense_layers": 1,
                **moe},
    }  # fmt: skip
    return {"models": {"moe": spec, "tok": {"source": "hub", "id": "Qwen/Qwen3-0.6B"}}}


def test_glm4_moe_parameter_count_by_hand_and_active_experts():
    V, h, L, a, g, d, I = 100, 32, 3, 4, 2, 8, 48  # noqa: E741
    E, Ie, k, shared, dense = 6, 12, 2, 1, 1
    model = terms.build_model(_moe_config(), "moe")
    attn = h * a * d + 2 * h * g * d + a * d * h + 2 * d  # with qk-norm
    dense_layer = attn + 3 * h * I + 2 * h
    # a MoE layer: router (E x h, float32), E experts of gate+up (2 Ie x h) and down (h x Ie), shared SwiGLU experts
    moe_layer = attn + E * h + E * 3 * h * Ie + 3 * h * Ie * shared + 2 * h
    total = 2 * V * h + dense * dense_layer + (L - dense) * moe_layer + h
    active = total - (L - dense) * (E - k) * 3 * h * Ie  # a token uses top-k routed experts of each MoE layer
    n = terms.param_counts(model)
    assert (n.total, n.active) == (total, active)
    assert model.model.layers[1].mlp.gate.weight.dtype == torch.float32  # the router stays float32
    shapes = terms.layer_shapes(model)
    assert [s.experts for s in shapes] == [0, E, E] and shapes[1].mlp == Ie * shared and shapes[1].top_k == k


def test_scratch_vocabulary_rounds_the_tokenizer_up_and_p1_adds_the_mask_row(config):
    assert terms.build_model(config, "p2-2b-dense").config.vocab_size == 151680  # 151,669 -> a multiple of 64
    assert terms.build_model(config, "llama3.1-8b-magpie", mask_token=True).config.vocab_size == 128257
    assert terms.build_model(config, "qwen3-4b-instruct-2507", mask_token=True).config.vocab_size == 151936


# ----------------------------------------------------------------------------------------- the memory terms


def test_layer_activation_bytes_by_hand():
    s = terms.LayerShape(hidden=8, q=16, kv=4, mlp=10, qk_norm=True)
    norms = 2 * (4 * 8 + 2 * 8)  # two RMSNorms: float32 input copy + bf16 output
    attn = 2 * (16 + 4 + 4 + 16)  # q, k, v, attention output in bf16
    qk = (4 + 2) * (16 + 4)  # qk-norm on q and k: float32 copy + bf16 output
    mlp = 2 * 4 * 10  # gate, up, silu(gate), product
    assert terms.layer_activation_bytes(s, 2) == norms + attn + qk + mlp
    moe = terms.LayerShape(hidden=8, q=16, kv=4, mlp=10, qk_norm=True, experts=4, top_k=2, expert_mlp=3)
    router = 4 * 8 + 4 * 4  # float32 router input, float32 scores
    routed = 2 * 2 * (2 * 8 + 4 * 3)  # per expert a token visits: input, output, gate/up, silu, product
    assert terms.layer_activation_bytes(moe, 2) == norms + attn + qk + mlp + router + routed
    assert terms.head_activation_bytes(s, 2) == norms + attn + qk + mlp + 3 * (4 * 8 + 2 * 8) + 2 * 2 * 8


def test_memory_terms_by_hand():
    model = terms.Sharded(params=1000, trained=800, root=100, root_trained=100, unit=200, unit_trained=150,
                          stored_bytes=2000, trained_bytes=1600)  # fmt: skip
    teacher = terms.Sharded(params=1000, trained=1000, root=300, root_trained=300, unit=200, unit_trained=200,
                            stored_bytes=2000, trained_bytes=2000)  # fmt: skip
    t = terms.Training(
        paper="p1", run="r", model="m", world=4, nodes=1, micro=2, tokens=10, accumulation=1, steps=1,
        step_tokens=40, trained=model, frozen=(teacher,), compute_bytes=2, reduce_bytes=4, activations=10.0,
        logits=20.0, costs=(), attn_width=1, seq=1,
    )  # fmt: skip
    m = terms.memory_terms(t)
    # student backward: root + 2 units gathered (bf16), root + one unit of gradients (bf16), its float32 copy
    student = (100 + 2 * 200) * 2 + (100 + 150) * 2 + 150 * 4
    teacher_forward = (300 + 2 * 200) * 2
    assert student == 2100 and teacher_forward == 1400
    expected = {"params": 500, "grads": 400, "adamw": 800, "frozen": 500, "gathered": 2100, "activations": 10,
                "logits": 20}  # fmt: skip
    assert m == {**expected, "peak": sum(expected.values())}
    same = terms.memory_terms(t.__class__(**{**t.__dict__, "reduce_bytes": 2}))
    assert same["gathered"] == (100 + 2 * 200) * 2 + (100 + 150) * 2  # reduce dtype = compute dtype: no copy


def test_logits_bytes_by_hand():
    # forward end: (2 + 4) per trained row + 2 per frozen row + 4 for one head's upcast = 6*8 + 2*4 + 4*5 = 76
    # backward start: 4 per trained row + (8 + 2) for one head's gradients = 4*8 + 10*5 = 82
    assert terms.logits_bytes(10, 2, [3, 5], [4]) == 10 * 82
    # a frozen head whose log-softmax is computed (paper 1's teacher): forward 6*8 + 6*20 + 4*5 = 188 > 4*8 + 50
    assert terms.logits_bytes(10, 2, [3, 5], [20], frozen_logp=True) == 10 * 188


def test_flops_and_throughput_by_hand():
    t = terms.Training(
        paper="p1", run="r", model="m", world=8, nodes=1, micro=1, tokens=8, accumulation=1, steps=100,
        step_tokens=1000, trained=None, frozen=(), compute_bytes=2, reduce_bytes=2, activations=0.0, logits=0.0,
        costs=(terms.Cost(100, 2, 6), terms.Cost(50, 1, 2)), attn_width=4, seq=8,
    )  # fmt: skip
    flops = 6 * (100 + 2 * 2 * 4 * 8) + 2 * (50 + 2 * 1 * 4 * 8)  # 6N + 12 L q s trained, 2N + 4 L q s frozen
    assert terms.flops_per_token(t) == flops == 1596
    tp = terms.throughput(t, terms.GPU("card", 10, 1.0), 0.5)
    per_gpu = 0.5e12 / flops
    step_s = 1000 / (per_gpu * 8)
    assert tp["tokens_s"] == pytest.approx(per_gpu) and tp["step_s"] == pytest.approx(step_s)
    assert tp["wall_h"] == pytest.approx(100 * step_s / 3600) and tp["gpu_h"] == pytest.approx(8 * 100 * step_s / 3600)


# --------------------------------------------------------------------------------------- the paper config


def test_world_size_and_micro_batch_come_from_the_config(runs):
    main, magpie, gt = runs["p1", "main"], runs["p1", "magpie_data"], runs["p1", "gt_supervision"]
    assert (main.world, main.micro, main.tokens, main.accumulation) == (4, 32, 32 * 160, 1)
    assert (magpie.micro, magpie.tokens, magpie.step_tokens) == (4, 4 * 1024, 16 * 1024)
    assert len(main.frozen) == 1 and main.frozen[0].params == main.trained.params and gt.frozen == ()
    p2 = runs["p2", "mtpd_k4"]
    assert (p2.world, p2.nodes, p2.micro, p2.tokens, p2.accumulation) == (256, 32, 2, 2 * 4096, 1)
    assert p2.step_tokens == 512 * 4096 and p2.steps == 166893
    p4 = runs["p4", "main"]
    assert (p4.world, p4.micro, p4.tokens, p4.accumulation) == (8, 1, 4096, 512 // (1 * 8))


def test_p2_models_hold_the_trunk_and_k_heads_and_an_extension_trains_only_its_new_heads(runs, config):
    h, a, g, d, I, V, L = 2048, 16, 4, 128, 6144, 151680, 32  # noqa: E741  (models.p2-2b-dense)
    q = a * d
    layer = h * a * d + 2 * h * g * d + a * d * h + 3 * h * I + 2 * h + 2 * d
    trunk = 2 * V * h + L * layer + h
    head = layer + 2 * h * h + 3 * h  # a trunk-class layer, the 2h -> h projection, enorm / hnorm / outnorm
    k4 = runs["p2", "mtpd_k4"]
    assert k4.trained.params == k4.trained.trained == trunk + 4 * head and k4.frozen == ()
    ext = runs["p2", "loopd_4to8"]  # 4 -> 8: heads 5-8 train, 1-4 and the trunk frozen
    assert (ext.trained.params, ext.trained.trained) == (8 * head, 4 * head)
    assert [f.params for f in ext.frozen] == [trunk] and ext.trained.root == 0
    assert runs["p2", "loopd_1to8"].trained.trained == 7 * head
    body, attn = trunk - 2 * V * h, 2 * q * 4096
    rows = sum(2 * (4096 - 1 - k) for k in range(5, 9)) / 8192  # LM-head rows per token of the trained depths
    frozen = 2 * (body + V * h + 4 * head + (L + 4) * attn)  # trunk, main head, heads 1-4: forward only
    assert terms.flops_per_token(ext) == pytest.approx(frozen + 6 * (4 * head + 4 * attn) + 4 * V * h * rows)


def test_p1_logit_rows_and_flops_by_hand(runs, config):
    V = 128257  # Llama 3.1's vocabulary and the <MTP> row
    main, prefix = runs["p1", "main"], runs["p1", "prefix_loss"]
    rows = 32 * 5 * 16  # M = 5 regions x k_max = 16 prediction slots per row, 32 rows; the teacher's the same
    assert main.logits == V * max(6 * rows + 6 * rows + 4 * rows, 4 * rows + 10 * rows)
    both = 32 * 160  # the prefix loss also reads the other GT slots: every one of the 160 slots
    assert prefix.logits == V * max(6 * both + 6 * rows + 4 * both, 4 * both + 10 * both)
    n = terms.param_counts(terms.build_model(config, "llama3.1-8b-magpie", mask_token=True))
    per_slot = 5 * (2 + 16) / 2 / 160  # E[k] = 9 under k ~ U[2, 16]: 45 logit rows per 160 slots
    attn = 2 * 32 * 4096 * 160  # 2 x layers x q x seq
    assert terms.flops_per_token(main) == pytest.approx(
        6 * (n.body + n.lm_head * per_slot + attn) + 2 * (n.body + n.lm_head * per_slot + attn)
    )
    static = runs["p1", "static_k16"]  # k = 16 always: 80 rows per 160 slots
    assert terms.flops_per_token(static) == pytest.approx(8 * (n.body + n.lm_head * 0.5 + attn))


def test_p2_moe_active_parameters_by_hand(config):
    h, a, g, d, I, V, L = 1536, 32, 4, 128, 6912, 151680, 22  # noqa: E741  (models.p2-a1b-moe)
    E, Ie, k = 128, 768, 8
    attn = h * a * d + 2 * h * g * d + a * d * h + 2 * d
    active_moe = attn + E * h + k * 3 * h * Ie + 3 * h * Ie + 2 * h
    active = 2 * V * h + (attn + 3 * h * I + 2 * h) + (L - 1) * active_moe + h
    assert terms.param_counts(terms.build_model(config, "p2-a1b-moe")).active == active


def test_p2_logits_count_k_plus_one_heads_and_the_chunk_key_caps_them(config):
    assert config["papers"]["p2"]["method"]["loss"]["chunk_rows"] == 1024  # the paper config's chunked loss
    t = plan.p2_training(config, "mtpd_k4", {})
    V, N, c = 151680, 10000, 1024
    # 5 heads of at most 1024 rows: forward 6*5c + 4c beats backward 4*5c + 10c; Top-N log-probabilities of the
    # 4 trained heads (8 N per row, beta > 0) and the int64 Top-N index of the main head's rows
    assert t.logits == V * (6 * 5 * c + 4 * c) + 8 * N * 4 * c + 8 * N * c
    whole = copy.deepcopy(config)
    whole["papers"]["p2"]["method"]["loss"]["chunk_rows"] = None
    full = plan.p2_training(whole, "mtpd_k4", {})
    rows = [2 * (4096 - 1 - k) for k in range(1, 5)] + [2 * 4096]
    assert full.logits == V * max(6 * sum(rows) + 4 * 8192, 4 * sum(rows) + 10 * 8192) + 8 * N * (sum(rows[:4]) + 8192)


def test_param_dtype_key_stores_parameters_gradients_and_adamw_in_float32(config, runs):
    cfg = copy.deepcopy(config)
    cfg["papers"]["p4"]["train"]["param_dtype"] = "bfloat16"
    fp32 = terms.memory_terms(runs["p4", "main"])  # unset: float32 master weights
    bf16 = terms.memory_terms(plan.p4_training(cfg, "main", {}))
    for key in ("params", "grads", "adamw"):
        assert fp32[key] == 2 * bf16[key]
    assert fp32["gathered"] == bf16["gathered"]  # FSDP2 still gathers in fsdp_param_dtype (bf16)


def test_p4_reads_gradient_checkpointing(config, runs):
    h, q, kv, I, L = 2560, 4096, 1024, 9728, 36  # noqa: E741  (Qwen/Qwen3-4B)
    layer = 2 * 6 * h + 2 * (2 * q + 2 * kv) + 6 * (q + kv) + 8 * I
    tokens = 1 * 4096  # one row of max_tokens per micro-batch (the paper config: micro_batch_size 1)
    # each layer's bf16 input, one layer recomputed, the recorded h_base and the final norm
    assert runs["p4", "main"].activations == tokens * (L * 2 * h + layer + 2 * h + 6 * h)
    cfg = copy.deepcopy(config)
    cfg["papers"]["p4"]["method"]["gradient_checkpointing"] = False
    off = plan.p4_training(cfg, "main", {})
    assert off.activations == tokens * (L * layer + 2 * h + 6 * h)
    assert terms.flops_per_token(runs["p4", "main"]) - terms.flops_per_token(off) == pytest.approx(
        2 * (param_counts := terms.param_counts(terms.build_model(config, "qwen3-4b"))).body + 4 * L * q * 4096
    )
    assert param_counts.total == 4022468096


def test_a_batch_that_does_not_split_over_the_world_names_the_run(config):
    cfg = copy.deepcopy(config)
    # 128 / 32 = 4 micro-batches over 3 processes (one per GPU)
    cfg["papers"]["p1"]["launcher"].update(tasks_per_node=3, gpus_per_node=3)
    with pytest.raises(ConfigError, match=r"papers\.p1\.runs\.main.*tasks_per_node 3"):
        plan.p1_training(cfg, "main", {})


def test_the_report_groups_identical_runs_and_says_it_is_an_estimate(config, runs):
    ts = list(runs.values())
    text = plan.render(config, ts, 0.4, "python benchmarks/paper_scale_plan.py", "abc1234", "2026-01-01")
    assert "**Analytic estimate, not a measurement.**" in text and "`abc1234`" in text and "2026-01-01" in text
    p4_rows = [line for line in text.splitlines() if line.startswith("| p4 |")]
    assert len(p4_rows) == 6  # three models, once in each table
    assert "| main, mtd2, mtd4, mtd6, e4d0, e2d2, e0d4, e8d0, e4d4, e16d0, e8d8, e0d16 |" in p4_rows[0]
    peak = terms.memory_terms(runs["p1", "main"])["peak"]
    assert f"| {peak / GIB:.2f} | GH200 96 GB: {peak / (96 * GIB):.0%}" in text
