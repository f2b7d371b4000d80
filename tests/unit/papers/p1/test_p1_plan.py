"""Paper 1's experiment plan (`P1Plan`, mtp_core.papers.p1.plan): runs merging the shared settings, the sweep's labels and
jobs, config checks that name the bad key, every scale's plan, and the paper scale's runs, tasks and launch."""

from __future__ import annotations

import copy

import pytest
import torch
import yaml

from mtp_core.config.settings import ConfigError
from mtp_core.evaluate import EvalSettings
from mtp_core.papers.p1 import PAPER
from mtp_core.papers.p1.plan import EVAL_KEYS, FIGURES, TABLES, P1Plan, parse_label
from mtp_core.validation import load_config, validate_config
from tests.conftest import REPO


@pytest.fixture(scope="module")
def tiny_config():
    return load_config(REPO / "config/tiny.yaml")


def test_plan_runs_merge_shared_settings(tiny_config):
    plan = P1Plan(tiny_config)
    main, static = plan.run("main"), plan.run("static_k16")
    assert main.method["k_max"] == 4 and static.method["k_max"] == 16 and static.method["random_k"] is False
    assert static.method["seq_len"] == main.method["seq_len"] == 448 and static.train == {
        **main.train,
        "save_steps": [],
    }
    assert main.train["save_steps"] == [0]  # the dynamics checkpoints of the run shown in Figures 7-8, 10-11
    gt = plan.run("gt_supervision")
    assert gt.method["loss"]["objective"] == "gt" and gt.method["loss"]["prefix_weight"] == 0.0
    assert gt.title == "GT Suprv." and main.title == "main"
    s = plan.run_settings("main")
    assert s["base_dir"] == "results/models/finetuned/tiny-qwen3-math/model"
    assert s["data"] == "results/data/math/train.jsonl"
    assert s["p1"] == main.method and s["model"]["name"] == "tiny-qwen3-math"


def test_plan_sweep_labels_and_jobs(tiny_config):
    plan = P1Plan(tiny_config)
    assert list(plan.sweep()) == [
        "static-k1",
        "static-k2",
        "static-k3",
        "static-k4",
        "static-k5",
        "conf-adapt-tau0.9",
        "conf-adapt-tau0.5",
    ]
    assert plan.sweep()["conf-adapt-tau0.5"] == {"decoder": "conf-adapt", "tau": 0.5, "k_max": 4}
    assert list(plan.sweep(checkpoint=True)) == ["static-k1", "static-k3", "conf-adapt-tau0.9"]
    jobs = plan.jobs("table4")
    assert [(j.label, j.kind) for j in jobs] == [
        ("tiny-qwen3-math@step0", "baseline"),
        ("main", "final"),
        ("gt_supervision", "final"),
        ("bda", "final"),
    ]
    dyn = plan.jobs("fig7")
    assert [(j.label, j.kind, j.run) for j in dyn] == [("main", "final", "main"), ("main@step0", "checkpoint", "main")]
    assert plan.jobs_results(dyn[1:])[0] == "results/decode/p1/main@step0/synthetic_math_cot/static-k1.json"
    assert parse_label("main@step40") == ("main", 40) and parse_label("main") == ("main", None)
    inherited = {k: tiny_config["evaluation"][k] for k in EVAL_KEYS}
    assert plan.eval_settings("synthetic_math_cot") == inherited  # tiny p1 sets none: reuse
    cfg = copy.deepcopy(tiny_config)
    cfg["papers"]["p1"]["evaluation"] = {"limit": 3, "max_gen_toks": 9}
    cfg["papers"]["p1"]["tasks"]["synthetic_math_cot"]["max_gen_toks"] = 6
    assert P1Plan(cfg).eval_settings("synthetic_math_cot") == {**inherited, "limit": 3, "max_gen_toks": 6}


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda p: p["tables"]["table4"]["runs"].append("nope"), "papers.p1.tables.table4.runs\\[3\\]: run 'nope'"),
        (lambda p: p["runs"].update({"tiny-qwen3": {}}), "may not be named like a model"),
        (lambda p: p["runs"]["bda"].update({"method": {"bda": True, "k_maxx": 3}}), "runs.bda.method.*k_maxx"),
        (lambda p: p["runs"]["main"].update({"dataset": "pretrain"}), "paper 1 trains on"),
        (lambda p: p["checkpoints"].update({"steps": [0, 99]}), "exceed train.max_steps"),
        (lambda p: p["checkpoints"].update({"static_k": [7]}), "static-k7 are not in the decoding sweep"),
        (lambda p: p["figures"]["fig6"].update({"run": "nope"}), "figures.fig6.run: run 'nope'"),
    ],
)
def test_plan_check_names_the_bad_key(tiny_config, edit, message):
    cfg = copy.deepcopy(tiny_config)
    edit(cfg["papers"]["p1"])
    with pytest.raises(ConfigError, match=message):
        P1Plan(cfg).check()


@pytest.mark.parametrize("config", ["config.yaml", "config/paper.yaml", "config/tiny.yaml"])
def test_every_scale_enables_paper_1_with_a_valid_plan(config):
    cfg = load_config(REPO / config)
    assert PAPER.enabled(cfg)
    P1Plan(cfg).check()
    assert "main" in cfg["papers"]["p1"]["runs"]
    for name in (*TABLES, *FIGURES):
        assert name in cfg["papers"]["p1"]["tables"] or name in cfg["papers"]["p1"]["figures"]


def test_paper_scale_declares_the_papers_runs_and_tasks():
    cfg = load_config(REPO / "config/paper.yaml")
    p1 = cfg["papers"]["p1"]
    assert set(p1["runs"]) >= {
        "main",
        "gt_supervision",
        "bda",
        "soft_teacher",
        "static_k16",
        "prefix_loss",
        "magpie_data",
    }
    assert p1["tables"]["table1"]["tasks"] == ["gsm8k_cot_singleshot", "aime25", "gpqa_main_cot_n_shot"]
    plan = P1Plan(cfg)
    assert p1["evaluation"]["dtype"] == "float32" and plan.s.evaluation["dtype"] == "float32"  # as the paper evaluated
    assert p1["decoding"]["conf_adapt"]["taus"] == [
        0.995,
        0.99,
        0.98,
        0.97,
        0.96,
        0.95,
        0.9,
        0.87,
        0.85,
        0.8,
        0.75,
        0.7,
        0.65,
        0.6,
    ]
    # App. A.1's output truncation per task, beside the model's stop tokens (which always stop)
    until = {t: EvalSettings.from_config(cfg, **plan.eval_settings(t)).until for t in p1["tasks"]}
    assert until == {
        "gsm8k_cot_singleshot": ("Q:",),
        "aime25": (),
        "gpqa_main_cot_n_shot": (),
        "bbh_cot_fewshot": ("\n\n", "Q:"),
        "ifeval": ("Q:",),
        "cnn_dailymail_abisee": (),
    }
    magpie = plan.run("magpie_data")
    assert cfg["datasets"][magpie.dataset]["kind"] == "sharegpt" and magpie.method["seq_len"] == 1024
    assert plan.run("static_k16").method["random_k"] is False
    # the official layout: one node of 4 GPUs, micro-batch 32, no accumulation; 8 processes cannot split 4 micro-batches
    raw = yaml.safe_load((REPO / "config/paper.yaml").read_text())
    raw["papers"]["p1"]["launcher"].update(tasks_per_node=8, gpus_per_node=8)
    with pytest.raises(ConfigError, match=r"papers\.p1\.runs\.main: .* not divisible by world_size 8 .*= 8 processes"):
        validate_config(raw)
    launcher = plan.launcher_settings("main")
    assert launcher["tasks_per_node"] == 4 and launcher["gpus_per_node"] == 4
    assert plan.run("main").train["global_batch_size"] == 4 * 32


@pytest.mark.parametrize("config", ["config.yaml", "config/paper.yaml"])
def test_every_parameter_is_weight_decayed_as_the_official_adamw(config):
    """App. A.1 trains with AdamW at "PyTorch default settings" and the official code hands it every parameter at
    weight decay 0.1: a step of the run's optimiser on zero gradients shrinks the norm gains too (1-D parameters a
    decay/no-decay split would leave alone), every parameter by the factor 1 - lr * wd written by hand."""
    from mtp_core.models.load import tiny_model
    from mtp_core.train import TrainConfig
    from mtp_core.train.optim import build_optimizer
    from tests.conftest import tiny_spec

    train = P1Plan(load_config(REPO / config)).run_settings("main")["train"]
    # the run's optimiser at a learning rate large enough for the decay to clear float32's tolerance
    cfg = TrainConfig.from_dict({**train, "lr": 0.1, "max_steps": 10, "warmup_steps": 0, "fused": False})
    model = tiny_model(tiny_spec("llama", num_layers=1))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = build_optimizer(model, cfg)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    norms = [n for n in before if n.endswith("norm.weight")]
    assert norms and cfg.weight_decay == 0.1
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.detach(), before[n] * (1 - cfg.lr * cfg.weight_decay), msg=n)
