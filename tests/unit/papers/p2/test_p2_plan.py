"""Paper 2's plan: run merging (extensions inherit their source's method with a frozen trunk), mains, settings,
feature keys, result paths, speed rows across trunks, leaderboard rows, and the checks that name the key."""

from __future__ import annotations

import copy

import pytest
import torch
import yaml
from snakemake.utils import update_config

from mtp_core.config.settings import ConfigError, validate_schema
from mtp_core.models.heads.deepseek import DeepSeekMTPHeads
from mtp_core.models.load import tiny_model
from mtp_core.papers.p2.experiments import setting_label
from mtp_core.papers.p2.plan import P2Plan
from mtp_core.validation import check_references, load_config
from tests.conftest import REPO, tiny_spec


@pytest.fixture(scope="module")
def tiny():
    return load_config(REPO / "config/tiny.yaml")


@pytest.fixture(scope="module")
def p2(tiny):
    return P2Plan(tiny)


def test_runs_mains_and_settings(p2):
    ext = p2.run("loopd_4to8")
    assert ext.method["num_heads"] == 8 and ext.method["trunk"] == "frozen" and ext.method["loss"]["beta"] == 0.5
    assert ext.extend == {"from": "mtpd_k4", "new_heads": 4, "source": "latest", "group": 4}
    assert p2.main_of("mtpd_k4") == "tiny-qwen3-math" == p2.main_of("loopd_4to8")
    assert p2.main_of("t2_mtpd") == "t2_mtpd"  # a trained trunk decodes as its own main
    assert p2.heads_path("t2_mtpd") == "results/models/p2/t2_mtpd/model/heads"
    assert p2.heads_path("mtpd_k4") == "results/models/p2/mtpd_k4/model"
    assert p2.depths() == [1, 4, 8] and max(p2.depths()) == 8
    assert p2.result("mtp_k1", "math", setting_label(8)) == "results/decode/p2/mtp_k1/prompts-math/h8.json"
    keys = p2.feature_keys()
    assert set(keys) == {"tiny-qwen3-math-pretrain-s32-w0-t0", "tiny-qwen3-math-pretrain-s32-w0-t1"}
    assert keys["tiny-qwen3-math-pretrain-s32-w0-t0"]["rows"] == 12  # 3 steps x 4 rows, the longest run
    assert p2.feature_key("loopd_4to8") is None
    settings = p2.run_settings("loopd_4to8")
    assert settings["extend"]["heads"] == "results/models/p2/mtpd_k4/model" and settings["trunk_dir"] is None


@pytest.fixture(scope="module")
def embedded():
    return load_config(REPO / "config.yaml")


def test_each_extension_stage_copies_the_group_the_last_stage_trained(embedded):
    """4 -> 8 -> 12 -> 16 (§3.3): each stage copies the group its source stage trained (9-12 <- 5-8, 13-16 <-
    9-12), through the settings the launcher gets; "1 -> 8" copies head 1, and a stage after it head 8."""
    cfg = copy.deepcopy(embedded)
    cfg["papers"]["p2"]["runs"]["loopd_1to8_to12"] = {"extend": {"from": "loopd_1to8", "new_heads": 4}}
    validate_schema(cfg)  # its defaults (`extend.source`)
    plan = P2Plan(cfg)
    groups = {r: plan.run_settings(r)["extend"] for r in ("loopd_4to8", "loopd_8to12", "loopd_12to16")}
    assert [(e["group"], e["source"], e["new_heads"]) for e in groups.values()] == [(4, "latest", 4)] * 3
    assert plan.run_settings("loopd_1to8")["extend"]["group"] == 1
    assert plan.run_settings("loopd_1to8_to12")["extend"]["group"] == 1
    torch.manual_seed(0)
    heads = DeepSeekMTPHeads.from_trunk(tiny_model(tiny_spec("qwen3")), 4)
    with torch.no_grad():
        for i, h in enumerate(heads.heads):
            h.proj.weight.fill_(i + 1)  # head i+1's projection holds i+1
    for stage, run in enumerate(("loopd_4to8", "loopd_8to12", "loopd_12to16"), start=1):
        e = groups[run]
        k = heads.num_heads
        heads = heads.extend(e["new_heads"], e["group"], e["source"])
        with torch.no_grad():
            for h in heads.heads[k:]:
                h.proj.weight.add_(10 * stage)  # the stage's training moves its new heads
    tags = [int(h.proj.weight[0, 0]) for h in heads.heads]
    assert tags == [1, 2, 3, 4, 11, 12, 13, 14, 31, 32, 33, 34, 61, 62, 63, 64]


def test_speed_rows_and_leaderboard(p2):
    rows = p2.speed_rows("table8")
    labels = ["mtpd_k4-h8", "loopd_4to8-h8", "mtp_k1-h1"]
    assert [r["label"] for r in rows] == labels + [f"{x}-nokv" for x in labels]  # both protocols by default
    assert [r["kv_cache"] for r in rows] == [True] * 3 + [False] * 3
    assert p2.speed_baseline("table8") == "mtp_k1-h1"
    assert p2.speed_baseline("table8", kv=False) == "mtp_k1-h1-nokv"
    decoders = p2.speed_decoders("fig4")
    assert list(decoders)[0] == "greedy" and decoders["greedy-nokv"] == {"decoder": "greedy-uncached"}
    assert decoders["mtpd_k4-h4-nokv"] == {**decoders["mtpd_k4-h4"], "kv_cache": False}
    refs = p2.speed_refs("fig4")
    assert list(refs) == list(decoders)
    assert refs["mtpd_k4-h4-nokv"] == {"greedy": "greedy-nokv", "baseline": "mtp_k1-h1-nokv", "kv_cache": False}
    assert refs["mtpd_k4-h4"] == {"greedy": "greedy", "baseline": "mtp_k1-h1", "kv_cache": True}
    params = p2.report_params("fig4")["speed"]
    assert {r["protocol"] for r in params["rows"]} == {"KV cache", "no KV cache (App. D)"}
    entries = p2.leaderboard()
    assert [e.label for e in entries] == ["p2-mtp_k1-h1", "p2-mtpd_k4-h4"]
    assert entries[1].params == {"decoder": "mtp-spec", "heads": "results/models/p2/mtpd_k4/model", "num_drafts": 4}
    assert entries[1].checkpoint is None and entries[1].needs == ("results/models/p2/mtpd_k4/model",)


def test_speed_rows_of_several_trunks(tiny):
    cfg = copy.deepcopy(tiny)
    cfg["papers"]["p2"]["figures"]["fig4"] = {"runs": ["mtp_k1", "t2_mtpd"], "baseline": "mtp_k1", "kv_cache": [True]}
    plan = P2Plan(cfg)
    assert plan.speed_mains("fig4") == ["tiny-qwen3-math", "t2_mtpd"]
    assert list(plan.speed_decoders("fig4")) == ["greedy", "greedy-t2_mtpd", "mtp_k1-h1", "t2_mtpd-h1"]
    assert plan.speed_trunks("fig4")["greedy-t2_mtpd"] == "t2_mtpd"
    assert plan.speed_refs("fig4")["t2_mtpd-h1"]["greedy"] == "greedy-t2_mtpd"
    cfg["papers"]["p2"]["figures"]["fig4"]["kv_cache"] = [False]  # the paper's protocol alone
    plan = P2Plan(cfg)
    assert list(plan.speed_decoders("fig4")) == [
        "greedy-nokv", "greedy-nokv-t2_mtpd", "mtp_k1-h1-nokv", "t2_mtpd-h1-nokv"
    ]  # fmt: skip
    assert plan.speed_trunks("fig4")["greedy-nokv-t2_mtpd"] == "t2_mtpd"
    assert plan.speed_refs("fig4")["t2_mtpd-h1-nokv"]["greedy"] == "greedy-nokv-t2_mtpd"


def test_figure8_times_the_moe_runs_against_the_dense_baseline():
    """App. E.1's Fig. 8 at paper scale: the A1B MoE runs at their K, each on its own pretrained trunk, against the
    2B dense MTP K = 1, under both protocols."""
    plan = P2Plan(load_config(REPO / "config/paper.yaml"))
    assert "fig8" in plan.speed_experiments()
    rows = [r for r in plan.speed_rows("fig8") if r["kv_cache"]]
    assert [(r["run"], r["depth"]) for r in rows] == [
        ("mtp_k1", 1), ("moe_mtp_k1", 1), ("moe_mtpd_k1", 1), ("moe_mtp_k4", 4), ("moe_mtpd_k4", 4)
    ]  # fmt: skip
    models = {r["run"]: plan.run(r["run"]).model for r in rows}
    assert models.pop("mtp_k1") == "p2-2b-dense" and set(models.values()) == {"p2-a1b-moe"}
    refs = plan.speed_refs("fig8")
    assert {refs[r["label"]]["baseline"] for r in rows} == {"mtp_k1-h1"}
    assert refs["moe_mtpd_k4-h4-nokv"]["baseline"] == "mtp_k1-h1-nokv"


def test_table3_has_a_column_per_trunk():
    """Table 3 at paper scale: the 2B dense trunk and the A1B MoE one, each with the head counts its runs train."""
    plan = P2Plan(load_config(REPO / "config/paper.yaml"))
    models = plan.report_params("table3")["models"]
    assert [(m["name"], m["heads"]) for m in models] == [("p2-2b-dense", [1, 4, 8, 12, 16]), ("p2-a1b-moe", [1, 4])]
    inputs = plan.report_inputs("table3")["files"]
    assert any("p2-a1b-moe" in f for f in inputs) and any("p2-2b-dense" in f for f in inputs)


def test_seed_replicates_are_runs_of_their_own(tiny, p2):
    """`seeds: 2` on mtp_k1: a replicate `mtp_k1-seed1` with train.seed + 1, the same method, trunk and feature
    cache; Table 1 reads its acceptance at its K, Table 5 does not."""
    names = p2.run_names()
    assert names[:4] == ["mtp_k1", "mtp_k1-seed1", "mtpd_k1", "mtpd_k1-seed1"] and "mtp_k4-seed1" not in names
    rep, run = p2.run("mtp_k1-seed1"), p2.run("mtp_k1")
    assert rep.name == "mtp_k1-seed1" and rep.train["seed"] == run.train["seed"] + 1 == 1
    assert rep.method == run.method and rep.title == run.title and p2.num_heads("mtp_k1-seed1") == 1
    assert p2.main_of("mtp_k1-seed1") == "tiny-qwen3-math" and p2.is_run("mtp_k1-seed1")
    assert p2.feature_key("mtp_k1-seed1") == p2.feature_key("mtp_k1")
    settings = p2.run_settings("mtp_k1-seed1")
    assert settings["train"]["seed"] == 1 and settings["p2"] == p2.run_settings("mtp_k1")["p2"]
    assert p2.launcher_settings("mtp_k1-seed1") == p2.launcher_settings("mtp_k1")
    assert p2.result("mtp_k1-seed1", "math", "h1") in p2.experiment_inputs("table1")
    assert not any("seed1" in f for f in p2.experiment_inputs("table5"))
    params = p2.report_params("table1")
    assert params["runs"]["mtp_k1"]["replicates"] == ["mtp_k1-seed1"] and "mtpd_k1-seed1" in params["runs"]
    with pytest.raises(ConfigError, match="mtp_k1-seed2"):
        p2.run("mtp_k1-seed2")  # seeds: 2 makes one replicate
    cfg = copy.deepcopy(tiny)
    cfg["papers"]["p2"]["runs"]["t2_mtpd"]["seeds"] = 2  # a trained trunk: each replicate decodes with its own
    plan = P2Plan(cfg)
    assert plan.main_of("t2_mtpd-seed1") == "t2_mtpd-seed1"
    assert plan.heads_path("t2_mtpd-seed1") == "results/models/p2/t2_mtpd-seed1/model/heads"


def test_the_embedded_all_leaves_out_what_embedded_p2_full_adds(embedded):
    """The embedded `all` trains Table 1's arms once and times Figure 4 KV-cached only (its time budget);
    config/embedded-p2-full.yaml, merged over config.yaml as Snakemake merges `--configfile a b`, adds the seed
    replicates (K = 1 arms 3 times, K = 4 twice) and App. D's uncached protocol, and changes nothing else of paper 2."""
    seeds = {"mtp_k1": 3, "mtpd_k1": 3, "mtp_k4": 2, "mtpd_k4": 2}  # Table 1's arms and their trainings
    lean = P2Plan(embedded)
    assert not [n for n in lean.run_names() if "-seed" in n] and lean.speed_protocols("fig4") == [True]
    raw = yaml.safe_load((REPO / "config.yaml").read_text())
    update_config(raw, yaml.safe_load((REPO / "config/embedded-p2-full.yaml").read_text()))
    validate_schema(raw)
    check_references(raw)
    full = P2Plan(raw)
    assert [n for n in full.run_names() if "-seed" in n] == [
        f"{a}-seed{i}" for a, n in seeds.items() for i in range(1, n)
    ]
    assert full.speed_protocols("fig4") == [True, False]
    assert {r["label"] for r in full.speed_rows("fig4")} == {
        *(r["label"] for r in lean.speed_rows("fig4")),
        *(f"{a}-h{1 if a.endswith('k1') else 4}-nokv" for a in seeds),
    }
    assert [n for n in full.run_names() if "-seed" not in n] == lean.run_names()
    for name in lean.run_names():
        assert full.run_settings(name) == lean.run_settings(name)


def _bad(tiny, edit, message):
    cfg = copy.deepcopy(tiny)
    edit(cfg["papers"]["p2"])
    with pytest.raises(ConfigError, match=message):
        check_references(cfg)


def test_checks_name_the_key(tiny):
    _bad(
        tiny,
        lambda s: s["runs"]["mtp_k1"].update(method={"loss": {"topn": 0}}),
        r"papers\.p2\.runs\.mtp_k1\.method.*topn",
    )
    _bad(tiny, lambda s: s["runs"]["mtp_k1"].update(method={"num_heads": 0}), r"runs\.mtp_k1\.method.*num_heads")
    _bad(tiny, lambda s: s["runs"]["mtp_k1"].update(method={"loss": {"beta": -1}}), r"runs\.mtp_k1\.method.*beta")
    _bad(tiny, lambda s: s["tables"]["table5"].update(runs=["nope"]), r"papers\.p2\.tables\.table5: run 'nope'")
    _bad(tiny, lambda s: s["figures"]["fig3"].update(depth=6), r"papers\.p2\.figures\.fig3\.depth")
    _bad(tiny, lambda s: s["figures"]["fig4"].update(baseline="t2_mtpd"), r"fig4\.baseline")
    _bad(
        tiny,
        lambda s: s["runs"].update(x={"extend": {"from": "mtpd_k4", "new_heads": 2, "group": 5}}),
        r"runs\.x\.extend\.group",
    )
    _bad(tiny, lambda s: s["runs"].update({"tiny-llama": {}}), r"named like a model")
    _bad(tiny, lambda s: s["runs"]["mtp_k1"].update(train={"max_steps": 1, "warmup_steps": 1}), r"warmup_steps")
    _bad(tiny, lambda s: s.update(in_all=["table1", "table6"]) or s["tables"].pop("table6"), r"in_all: table6")
    _bad(tiny, lambda s: s["runs"]["loopd_4to8"].update(seeds=2), r"runs\.loopd_4to8\.seeds: an extension")
    _bad(tiny, lambda s: s["runs"].update({"mtp_k1-seed1": {}}), r"runs\.mtp_k1\.seeds: its replicate 'mtp_k1-seed1'")
    _bad(tiny, lambda s: s["figures"]["fig4"].update(baseline="t2_mtpd", kv_cache=[False]), r"fig4\.baseline")
    _bad(tiny, lambda s: s.update(validation_dataset="math"), r"validation_dataset: 'math' is not a declared pretrain")
    _bad(tiny, lambda s: s.update(validation_windows=63), r"runs\.mtp_k1\.method\.val_tokens: 2000 .* 63 validation")


def test_validation_windows_read_the_named_dataset(embedded, p2):
    """The embedded trunk was fine-tuned on the math train split that `pretrain_math` renders: its validation
    windows come from the validation split's rendering, an input of the jobs that read them; the tiny config's
    from the training stream's tail."""
    plan, val = P2Plan(embedded), "results/data/pretrain_math_val/shards/index.json"
    main = plan.main_of("mtpd_k1")
    assert plan.windows_spec(main)["validation"] == val
    assert plan.reference_inputs(main)["validation"] == val == plan.acceptance_inputs("mtpd_k1")["validation"]
    rendering = ("kind", "source", "dataset", "template", "tokenizer")  # the one rendering, another split
    train, held_out = (embedded["datasets"][d] for d in ("pretrain_math", "pretrain_math_val"))
    assert {k: train[k] for k in rendering} == {k: held_out[k] for k in rendering}
    assert (train["split"], held_out["split"]) == ("train", "validation")
    assert p2.windows_spec("tiny-qwen3-math")["validation"] is None
    assert "validation" not in p2.reference_inputs("tiny-qwen3-math")


def test_figure5_declares_the_acceptance_its_car_panel_reads(p2):
    """Figure 5 reads each row's speed and, for its CAR panel, the row's acceptance at the row's depth on every
    prompt set: both are its inputs (the rehearsal once built it before the acceptance of `loopd_4to8` existed)."""
    inputs = p2.experiment_inputs("fig5")
    assert set(p2.speed_outputs("fig5")) <= set(inputs)
    for row in p2.s.figures.fig5.rows:
        depth = row.depth or p2.num_heads(row.run)
        for ps in p2.s.prompt_sets:
            assert p2.result(row.run, ps, setting_label(depth)) in inputs, (row, ps)
