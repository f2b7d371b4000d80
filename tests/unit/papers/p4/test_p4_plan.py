"""Paper 4's plan (names, jobs, checks naming the key, the run length) and the leaderboard rows (its report:
test_p4_report.py)."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from mtp_core.bench.leaderboard import plan as leaderboard
from mtp_core.config.settings import ConfigError
from mtp_core.papers.p4.epochs import resolve_train
from mtp_core.papers.p4.plan import P4Plan
from mtp_core.validation import load_config, validate_config
from tests.conftest import REPO


@pytest.fixture(scope="module")
def tiny() -> dict:
    return load_config(REPO / "config/tiny.yaml")


@pytest.fixture(scope="module")
def embedded() -> dict:
    return load_config(REPO / "config.yaml")


def raw(path: str = "config/tiny.yaml") -> dict:
    return yaml.safe_load((REPO / path).read_text())


def test_labels_settings_and_results(tiny, embedded):
    plan, big = P4Plan(tiny), P4Plan(embedded)
    assert list(plan.label_taus()) == ["tiny-qwen3-math@step0", "e1d0", "main", "main@step0", "mtd2"]
    assert plan.label_taus()["main"] == [1, 3] and plan.label_taus()["main@step0"] == [3]
    assert plan.parse_label("main@step0") == ("untrained", "main")
    assert plan.parse_label("tiny-qwen3-math@step0") == ("vanilla", "tiny-qwen3-math")
    assert plan.job_settings("main@step0") == {
        "dmtd-tau3": {"decoder": "dmtd", "tau": 3, "encoding_layers": 0, "decoding_layers": 1, "combine": "add"}
    }
    assert plan.job_settings("tiny-qwen3-math@step0") == {"greedy": {"decoder": "greedy"}}
    assert plan.job_results("tiny-qwen3-math@step0") == [
        "results/decode/p4/tiny-qwen3-math@step0/tf-math/vanilla.json",
        "results/decode/p4/tiny-qwen3-math@step0/synthetic_math_cot/greedy.json",
    ]
    assert big.label_taus()["main"] == [1, 2, 3, 4, 5, 6]
    assert big.speed_outputs()[1][:2] == [
        "results/decode/p4/main/speed-b1/greedy.json",
        "results/decode/p4/main/speed-b1/dmtd-tau1.json",
    ]
    layout = big.table_layout("table5")
    assert [r["title"] for r in layout] == ["Vanilla", *(f"3→{t}" for t in range(1, 7)), "untrained E0D8 (τ=3)"]
    assert layout[3]["files"]["tf_acc"] == "results/decode/p4/main/tf-math/dmtd-tau3.json"
    assert layout[3]["vanilla"]["synthetic_math_cot"].endswith("smollm2-135m-math@step0/synthetic_math_cot/greedy.json")
    t2 = big.table_layout("table2")
    assert [(r["block"], r["title"]) for r in t2] == [
        (None, "Vanilla"),
        ("Reuse 8 Layers", "E8D0"),
        ("Reuse 8 Layers", "E4D4"),
        ("Reuse 8 Layers", "E0D8"),
    ]
    assert [r["title"] for r in big.table_layout("table1")] == ["Vanilla", "MTD2", "MTD3", "MTD4", "MTD6"]
    assert big.targets()[:2] == ["results/tables/p4/table3.csv", "results/tables/p4/table3.md"]


def _files(cfg: dict, label: str, tau: int) -> dict:
    """The result files a row at (label, τ) reads, spelled out: τ 0 is a vanilla row (plain teacher-forced scores,
    greedy generation), else `dmtd` at τ, the inference τ (Table 5's k → z)."""
    tf_setting, gen = ("vanilla", "greedy") if tau == 0 else (f"dmtd-tau{tau}", f"dmtd-tau{tau}")
    tf_task = f"tf-{cfg['papers']['p4']['teacher_forced']['dataset'] or cfg['papers']['p4']['dataset']}"
    out = {"tf_acc": f"results/decode/p4/{label}/{tf_task}/{tf_setting}.json"}
    return out | {t: f"results/decode/p4/{label}/{t}/{gen}.json" for t in cfg["papers"]["p4"]["tasks"]}


PAPER_TABLES = {  # (block, title, label, τ, the start model whose Vanilla row it is measured against)
    "table1": [
        (None, "Vanilla", "qwen3-4b@step0", 0, "qwen3-4b"),
        *((None, f"MTD{t}", r, t, "qwen3-4b") for r, t in [("mtd2", 2), ("main", 3), ("mtd4", 4), ("mtd6", 6)]),
    ],
    "table2": [
        (None, "Vanilla", "qwen3-4b@step0", 0, "qwen3-4b"),
        *((g, r.upper(), r, 3, "qwen3-4b") for g, r in [("Reuse 4 Layers", r) for r in ("e4d0", "e2d2", "e0d4")]),
        *((g, r.upper(), r, 3, "qwen3-4b") for g, r in [("Reuse 8 Layers", r) for r in ("e8d0", "e4d4")]),
        ("Reuse 8 Layers", "E0D8", "main", 3, "qwen3-4b"),
        *((g, r.upper(), r, 3, "qwen3-4b") for g, r in [("Reuse 16 Layers", r) for r in ("e16d0", "e8d8", "e0d16")]),
    ],
    "table4": [
        ("qwen3-0.6b", "Vanilla", "qwen3-0.6b@step0", 0, "qwen3-0.6b"),
        ("qwen3-0.6b", "Ours", "q06_main", 3, "qwen3-0.6b"),
        ("qwen3-1.7b", "Vanilla", "qwen3-1.7b@step0", 0, "qwen3-1.7b"),
        ("qwen3-1.7b", "Ours", "q17_main", 3, "qwen3-1.7b"),
        ("qwen3-4b", "Vanilla", "qwen3-4b@step0", 0, "qwen3-4b"),
        ("qwen3-4b", "Ours", "main", 3, "qwen3-4b"),
    ],
    "table5": [
        (None, "Vanilla", "qwen3-4b@step0", 0, "qwen3-4b"),
        *((None, f"3→{t}", "main", t, "qwen3-4b") for t in (2, 3, 4, 5, 6)),
    ],
}
TINY_TABLE5 = [
    (None, "Vanilla", "tiny-qwen3-math@step0", 0, "tiny-qwen3-math"),
    (None, "3→1", "main", 1, "tiny-qwen3-math"),
    (None, "3→3", "main", 3, "tiny-qwen3-math"),
    (None, "untrained E0D1 (τ=3)", "main@step0", 3, "tiny-qwen3-math"),
]


@pytest.mark.parametrize("scale", ["paper", "tiny"])
def test_every_table_row_reads_its_files(tiny, scale):
    """Every row of every quality table, spelled out: its block, title, label, τ (a trained run's row at the
    inference τ: Table 5's 3→4 reads `dmtd-tau4`), the file of each column, and the Vanilla files its retention
    divides by (Table 4: the row's own start model); each file is an output of an evaluation job."""
    cfg = load_config(REPO / "config/paper.yaml") if scale == "paper" else tiny
    plan = P4Plan(cfg)
    tables = PAPER_TABLES if scale == "paper" else {"table5": TINY_TABLE5}
    written = {f for label in plan.label_taus() for f in plan.job_results(label)}
    for name, rows in tables.items():
        layout = plan.table_layout(name)
        got = [(r["block"], r["title"], r["label"], r["tau"]) for r in layout]
        assert got == [row[:4] for row in rows], name
        for r, (*_, label, tau, model) in zip(layout, rows):
            assert r["files"] == _files(cfg, label, tau) and r["vanilla"] == _files(cfg, f"{model}@step0", 0)
        assert set(plan.table_results(name)) <= written, name
    run, tau = ("main", 4) if scale == "paper" else ("main", 1)  # decoded at an inference τ other than its cycle 3
    assert plan.job_settings(run)[f"dmtd-tau{tau}"] == {"decoder": "dmtd", "tau": tau}
    assert plan.setting_params("main@step0", 3) == {
        "decoder": "dmtd",
        "tau": 3,
        "encoding_layers": 0,
        "decoding_layers": 8 if scale == "paper" else 1,
        "combine": "add",
    }


def test_schema_defaults_are_the_papers_recipe():
    cfg = raw()
    cfg["papers"]["p4"] = {
        "enabled": True,
        "model": "tiny-qwen3-math",
        "dataset": "math",
        "method": {"decoding_layers": 1},
        "train": {"max_steps": 10, "warmup_steps": 1},  # the run length has no default (max_steps or epochs)
        "speed": {"batch_sizes": [1]},
    }
    validate_config(cfg)
    s = cfg["papers"]["p4"]
    assert s["method"] | {"decoding_layers": 8} == {
        "encoding_layers": 0,
        "decoding_layers": 8,
        "cycle": 3,
        "combine": "add",
        "phase": "row",
        "max_tokens": 4096,
        "overlong": "drop",
        "template": "auto",
        "loss_on": "response",
        "train_embeddings": True,
        "gradient_checkpointing": False,
        "shuffle": True,
        "seed": 0,
    }  # no `epochs`, `warmup_ratio`: absent, the settings of a max_steps run are what they were before these keys
    t = s["train"]
    assert (t["lr"], t["betas"], t["weight_decay"], t["global_batch_size"], t["schedule"], t["grad_clip"]) == (
        1e-4,
        [0.9, 0.95],
        0.0,
        512,
        "cosine",
        1.0,
    )
    assert t["loss_weighting"] == "tokens"  # Eq. 6's token mean, whatever the micro-batch size
    assert s["tables"]["table5"] == {"run": "main", "taus": [2, 3, 4, 5, 6], "untrained": False}


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s["method"].update(decoding_layers=2), r"papers\.p4\.runs\.main\.method .*decoding_layers = 0 \+ 2"),
        (lambda s: s["runs"].update(speed={}), r"papers\.p4\.runs\.speed: `p4_speed` is a rule"),
        (lambda s: s["runs"].update({"x@step0": {}}), r"papers\.p4\.runs: 'x@step0' does not match"),
        (lambda s: s["runs"].update({"tiny-qwen3": {}}), "may not be named like a model"),
        (
            lambda s: s["runs"].update({"e": {"method": {"encoding_layers": 1, "decoding_layers": 1}}}),
            r"papers\.p4\.runs\.e\.method .*at least one thinking layer",
        ),
        (lambda s: s["tables"].update(table1={"runs": ["nope"]}), r"papers\.p4\.tables\.table1\.runs\[0\]: run 'nope'"),
        (lambda s: s.update(leaderboard={"run": "mtd2"}), r"papers\.p4\.leaderboard\.run: the τ choice reads"),
        (lambda s: s.update(teacher_forced={"dataset": "sharegpt"}), r"papers\.p4\.teacher_forced\.dataset"),
        (lambda s: s.update(overall=["bleu"]), r"papers\.p4\.overall\[0\]: 'bleu'"),
        (lambda s: s["runs"]["mtd2"].update(method={"cycle": 0}), "cycle"),
        (lambda s: s["runs"]["mtd2"].update(train={"global_batch_size": 3}), r"papers\.p4\.runs\.mtd2"),
        (lambda s: s["runs"]["e1d0"].update(model="tiny-llama"), r"papers\.p4\.tables\.table2: its runs start from"),
        (lambda s: s["train"].pop("max_steps"), r"papers\.p4\.runs\.main: set train\.max_steps or method\.epochs"),
        (
            lambda s: s["runs"]["mtd2"].update(method={"epochs": 1}),
            r"runs\.mtd2: set train\.max_steps \(3\) or .*not both",
        ),
        (lambda s: s["train"].update(warmup_steps=4), r"runs\.main: train\.max_steps 3: a warm-up of 4 steps > the"),
        (lambda s: s["method"].update(epochs=0), r"papers\.p4\.method\.epochs: 0 is less than"),
    ],
)
def test_bad_config_names_the_key(tiny, edit, message):
    """The validated tiny config with one edit, validated again (the schema fills an edited section's defaults,
    then `validation.check_references` runs `P4Plan.check`)."""
    cfg = copy.deepcopy(tiny)
    edit(cfg["papers"]["p4"])
    with pytest.raises(ConfigError, match=message):
        validate_config(cfg)


def test_run_length_in_epochs(tiny):
    """An epoch-based run (`method.epochs`, no `train.max_steps`) passes the plan: the launcher's settings carry no
    step count (the job counts its rows); the paper config's runs are all one epoch with a 0.1 warm-up ratio."""
    cfg = copy.deepcopy(tiny)
    s = cfg["papers"]["p4"]
    s["train"].pop("max_steps")
    s["method"] |= {"epochs": 2, "warmup_ratio": 0.1}
    validate_config(cfg)
    assert "max_steps" not in P4Plan(cfg).run_settings("main")["train"]
    assert P4Plan(cfg).run_settings("mtd2")["p4"]["epochs"] == 2
    # one step of a small data file (the rehearsal's): a warm-up ratio gives a 1-step warm-up, which is allowed
    assert resolve_train({"global_batch_size": 16}, 1, 0.1, rows=10) == {
        "global_batch_size": 16,
        "max_steps": 1,
        "warmup_steps": 1,
    }
    paper = P4Plan(load_config(REPO / "config/paper.yaml"))
    paper.check()
    for run in paper.s.runs:
        rp = paper.run_plan(run)
        assert (rp.method["epochs"], rp.method["warmup_ratio"], "max_steps" in rp.train) == (1, 0.1, False), run


def test_unsupported_architecture_is_named(tiny, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "num_hidden_layers": 12}))
    cfg = copy.deepcopy(tiny)
    cfg["models"]["gpt"] = {"source": "local", "path": str(tmp_path), "chat_template": False}
    cfg["papers"]["p4"]["runs"]["mtd2"]["model"] = "gpt"
    with pytest.raises(ConfigError, match=r"papers\.p4\.runs\.mtd2\.model: 'gpt' is a 'gpt2' model"):
        validate_config(cfg)


def test_leaderboard_rows(tiny):
    rows = {e.label: e for e in leaderboard.entries(tiny) if e.paper == "p4"}
    assert set(rows) == {"p4-main-dmtd-tau3", "p4-main-dmtd-selected"}
    assert rows["p4-main-dmtd-tau3"].params == {"decoder": "dmtd", "tau": 3}
    assert rows["p4-main-dmtd-selected"].params_from == "results/analysis/p4/main/selected_tau.json"
    assert "results/analysis/p4/main/selected_tau.json" in leaderboard.row_inputs(tiny)
    off = copy.deepcopy(tiny)
    off["papers"]["p4"]["leaderboard"] = {"run": "main", "selected": False}
    assert [e.label for e in P4Plan(validate_config(off)).leaderboard()] == ["p4-main-dmtd-tau3"]


def test_declared_layers_without_loading_weights(tiny, embedded, tmp_path):
    from mtp_core.models.plan import declared_layers

    assert declared_layers(tiny, "tiny-qwen3-math") == ("qwen3", 2)  # a fine-tuned model: its base's spec
    assert declared_layers(embedded, "smollm2-135m", results=str(tmp_path)) is None  # not converted yet: unknown
    prepared = tmp_path / "models/base/smollm2-135m"
    prepared.mkdir(parents=True)
    (prepared / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 30}))
    assert declared_layers(embedded, "smollm2-135m-math", results=str(tmp_path)) == ("llama", 30)
