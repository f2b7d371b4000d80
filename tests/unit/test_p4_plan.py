"""Paper 4's plan (names, jobs, checks naming the key), its report (tables, the τ choice, Figure 5's fit) on hand-made
result files, and the leaderboard rows with a parameter file."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pandas as pd
import pytest
import yaml

from mtp_core import leaderboard
from mtp_core.config import ConfigError
from mtp_core.decode_run import row_params
from mtp_core.papers.p4 import checks, plan
from mtp_core.papers.p4.report import binned_curve, log_fit, quality_table, ratio_with_stderr, select_tau
from mtp_core.results import make_result, write_result
from mtp_core.validation import load_config, validate_config

from ..conftest import REPO


@pytest.fixture(scope="module")
def tiny() -> dict:
    return load_config(REPO / "config/tiny.yaml")


@pytest.fixture(scope="module")
def embedded() -> dict:
    return load_config(REPO / "config.yaml")


def raw(path: str = "config/tiny.yaml") -> dict:
    return yaml.safe_load((REPO / path).read_text())


def test_labels_settings_and_results(tiny, embedded):
    assert list(plan.label_taus(tiny)) == ["tiny-qwen3-math@step0", "e1d0", "main", "main@step0", "mtd2"]
    assert plan.label_taus(tiny)["main"] == [1, 3] and plan.label_taus(tiny)["main@step0"] == [3]
    assert plan.parse_label(tiny, "main@step0") == ("untrained", "main")
    assert plan.parse_label(tiny, "tiny-qwen3-math@step0") == ("vanilla", "tiny-qwen3-math")
    assert plan.job_settings(tiny, "main@step0") == {
        "dmtd-tau3": {"decoder": "dmtd", "tau": 3, "encoding_layers": 0, "decoding_layers": 1, "combine": "add"}
    }
    assert plan.job_settings(tiny, "tiny-qwen3-math@step0") == {"greedy": {"decoder": "greedy"}}
    assert plan.job_results(tiny, "tiny-qwen3-math@step0") == [
        "results/decode/p4/tiny-qwen3-math@step0/tf-math/vanilla.json",
        "results/decode/p4/tiny-qwen3-math@step0/synthetic_math_cot/greedy.json",
    ]
    assert plan.label_taus(embedded)["main"] == [1, 2, 3, 4, 5, 6]
    assert plan.speed_results(embedded)[:2] == [
        "results/decode/p4/main/speed-b1/greedy.json",
        "results/decode/p4/main/speed-b1/dmtd-tau1.json",
    ]
    layout = plan.table_layout(embedded, "table5")
    assert [r["title"] for r in layout] == ["Vanilla", *(f"3→{t}" for t in range(1, 7)), "untrained E0D8 (τ=3)"]
    assert layout[3]["files"]["tf_acc"] == "results/decode/p4/main/tf-math/dmtd-tau3.json"
    assert layout[3]["vanilla"]["synthetic_math_cot"].endswith("smollm2-135m-math@step0/synthetic_math_cot/greedy.json")
    t2 = plan.table_layout(embedded, "table2")
    assert [(r["block"], r["title"]) for r in t2] == [
        (None, "Vanilla"),
        ("Reuse 8 Layers", "E8D0"),
        ("Reuse 8 Layers", "E4D4"),
        ("Reuse 8 Layers", "E0D8"),
    ]
    assert [r["title"] for r in plan.table_layout(embedded, "table1")] == ["Vanilla", "MTD2", "MTD3", "MTD4", "MTD6"]
    assert plan.all_targets(embedded)[:2] == ["results/tables/p4/table3.csv", "results/tables/p4/table3.md"]


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
        "epochs": None,
        "warmup_ratio": None,
    }
    t = s["train"]
    assert (t["lr"], t["betas"], t["weight_decay"], t["global_batch_size"], t["schedule"], t["grad_clip"]) == (
        1e-4,
        [0.9, 0.95],
        0.0,
        512,
        "cosine",
        1.0,
    )
    assert s["tables"]["table5"] == {"run": "main", "taus": [2, 3, 4, 5, 6], "untrained": False}


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s["method"].update(decoding_layers=2), r"papers\.p4\.runs\.main\.method .*decoding_layers = 0 \+ 2"),
        (lambda s: s["runs"].update(speed={}), r"papers\.p4\.runs\.speed: `p4_speed` is a rule"),
        (lambda s: s["runs"].update({"x@step0": {}}), r"papers\.p4\.runs\.x@step0: run names"),
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
        (lambda s: s["train"].update(warmup_steps=3), r"runs\.main: train\.max_steps 3: a warm-up of 3 steps >= the"),
        (lambda s: s["method"].update(warmup_ratio=0.9), r"runs\.main: train\.max_steps 3: a warm-up of 3 steps"),
        (lambda s: s["method"].update(epochs=0), r"runs\.main\.method .*epochs must be > 0"),
    ],
)
def test_bad_config_names_the_key(tiny, edit, message):
    """`checks.check` on the validated tiny config with one edit (what `validation.check_references` calls)."""
    cfg = copy.deepcopy(tiny)
    edit(cfg["papers"]["p4"])
    with pytest.raises(ConfigError, match=message):
        checks.check(cfg)


def test_run_length_in_epochs(tiny):
    """An epoch-based run (`method.epochs`, no `train.max_steps`) passes the plan: the launcher's settings carry no
    step count (the job counts its rows); the paper config's runs are all one epoch with a 0.1 warm-up ratio."""
    cfg = copy.deepcopy(tiny)
    s = cfg["papers"]["p4"]
    s["train"].pop("max_steps")
    s["method"] |= {"epochs": 2, "warmup_ratio": 0.1}
    checks.check(cfg)
    assert "max_steps" not in plan.run_settings(cfg, "main")["train"]
    assert plan.run_settings(cfg, "mtd2")["p4"]["epochs"] == 2
    paper = load_config(REPO / "config/paper.yaml")
    checks.check(paper)
    for run in plan.run_names(paper):
        rp = plan.run_plan(paper, run)
        assert (rp.method["epochs"], rp.method["warmup_ratio"], "max_steps" in rp.train) == (1, 0.1, False), run


def test_unsupported_architecture_is_named(tiny, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "num_hidden_layers": 12}))
    cfg = copy.deepcopy(tiny)
    cfg["models"]["gpt"] = {"source": "local", "path": str(tmp_path), "chat_template": False}
    cfg["papers"]["p4"]["runs"]["mtd2"]["model"] = "gpt"
    with pytest.raises(ConfigError, match=r"papers\.p4\.runs\.mtd2\.model: 'gpt' is a 'gpt2' model"):
        checks.check(cfg)


def _result(
    path: Path, value: float | None, stderr: float | None, key: str, settings: dict | None = None, plts=None
) -> str:
    write_result(
        str(path),
        make_result(
            kind="eval",
            paper="p4",
            run="r",
            model="m",
            task="t",
            decoder={"name": "dmtd", "lossless": False, "params": {}},
            n=16,
            metrics={key: {"value": value, "stderr": stderr}},
            decode_stats={"tokens_per_s": value},
            settings=settings or {},
            scale="tiny",
            config_hash="0" * 12,
        ),
        [{"extra": {"plt_measured": p}} for p in plts] if plts else None,
    )
    return str(path)


def test_quality_table_overall_is_the_mean_of_ratios(tmp_path):
    f = lambda name, v, key, **kw: _result(tmp_path / f"{name}.json", v, 0.01, key, **kw)  # noqa: E731
    van = {"tf_acc": f("v_tf", 0.80, "tf_acc,none"), "math": f("v_m", 0.50, "exact_match,flexible-extract")}
    ours = {
        "tf_acc": f("o_tf", 0.72, "tf_acc,none", settings={"plt": 0.5111}),
        "math": f("o_m", 0.40, "exact_match,flexible-extract", plts=[0.5, 0.6]),
    }
    layout = [
        {"block": None, "title": "Vanilla", "label": "m@step0", "tau": 0, "files": van, "vanilla": van},
        {"block": None, "title": "3→3", "label": "main", "tau": 3, "files": ours, "vanilla": van},
    ]
    table = quality_table(
        layout,
        ["tf_acc", "math"],
        ["tf_acc", "math"],
        {"tf_acc": "tf_acc,none", "math": None},
        {"tf_acc": "TF acc (val)"},
        offsets=2,
    )
    rows = table.data.set_index("row")
    assert rows.loc["Vanilla", "Overall (%)"] == pytest.approx(100.0)
    assert rows.loc["3→3", "Overall (%)"] == pytest.approx(100 * (0.72 / 0.80 + 0.40 / 0.50) / 2)
    assert rows.loc["3→3", "PLT"] == pytest.approx(0.5111) and rows.loc["3→3", "TF acc (val)"] == 0.72
    r, se = ratio_with_stderr(0.72, 0.01, 0.80, 0.01)
    assert r == pytest.approx(0.9) and se == pytest.approx(0.9 * math.hypot(0.01 / 0.72, 0.01 / 0.80))
    assert "block" not in table.data and "Overall (%)" in table.display().columns
    assert {"TF acc@0", "TF acc@1"} <= set(table.data) and math.isnan(rows.loc["Vanilla", "TF acc@1"])
    assert rows.loc["3→3", "PLT (measured)"] == pytest.approx(0.55) and rows.loc["Vanilla", "PLT (measured)"] == 1.0


def test_tau_choice_reads_retention_then_speed(tmp_path):
    van = _result(tmp_path / "van.json", 0.80, 0.01, "tf_acc,none")
    retention = {1: 0.99, 2: 0.95, 3: 0.91, 4: 0.70}
    tf = {t: _result(tmp_path / f"tf{t}.json", 0.80 * r, 0.01, "tf_acc,none") for t, r in retention.items()}
    speed = {t: _result(tmp_path / f"s{t}.json", 10.0 * t, None, "x,none") for t in retention}
    chosen = select_tau(van, tf, speed, 0.9)
    assert chosen["params"] == {"tau": 3} and "met" in chosen["rule"]
    assert [c["tau"] for c in chosen["candidates"]] == [1, 2, 3, 4]
    assert select_tau(van, tf, speed, 0.999)["params"] == {"tau": 1}  # none qualifies: the highest retention
    row = {"label": "p4-main-dmtd-selected", "params": {"decoder": "dmtd"}, "params_from": str(tmp_path / "c.json")}
    (tmp_path / "c.json").write_text(json.dumps(chosen))
    assert row_params(row) == {"decoder": "dmtd", "tau": 3}


def test_fig5_fit_recovers_a_log_linear_curve():
    tokens = [1000 * 2**i for i in range(1, 40)]
    curve = pd.DataFrame(
        {"step": range(1, 40), "tokens_total": tokens, "loss": [3.0 - 0.2 * math.log10(t) for t in tokens]}
    )
    pts = binned_curve(curve, warmup=3, bins=6)
    assert len(pts) == 6 and pts["tokens"].min() > tokens[2]
    fit = log_fit(pts)
    assert fit["slope"] == pytest.approx(-0.2, abs=1e-3) and fit["r2"] == pytest.approx(1.0)


def test_leaderboard_rows(tiny):
    rows = {e.label: e for e in leaderboard.entries(tiny) if e.paper == "p4"}
    assert set(rows) == {"p4-main-dmtd-tau3", "p4-main-dmtd-selected"}
    assert rows["p4-main-dmtd-tau3"].params == {"decoder": "dmtd", "tau": 3}
    assert rows["p4-main-dmtd-selected"].params_from == "results/analysis/p4/main/selected_tau.json"
    assert "results/analysis/p4/main/selected_tau.json" in leaderboard.row_inputs(tiny)
    off = copy.deepcopy(tiny)
    off["papers"]["p4"]["leaderboard"] = {"run": "main", "selected": False}
    assert [e.label for e in plan.leaderboard_entries(off)] == ["p4-main-dmtd-tau3"]


def test_declared_layers_without_loading_weights(tiny, embedded, tmp_path):
    from mtp_core.model_plan import declared_layers

    assert declared_layers(tiny, "tiny-qwen3-math") == ("qwen3", 2)  # a fine-tuned model: its base's spec
    assert declared_layers(embedded, "smollm2-135m", results=str(tmp_path)) is None  # not converted yet: unknown
    prepared = tmp_path / "models/base/smollm2-135m"
    prepared.mkdir(parents=True)
    (prepared / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 30}))
    assert declared_layers(embedded, "smollm2-135m-math", results=str(tmp_path)) == ("llama", 30)
