"""Paper 5's plan: decoder parameters and result paths per task, leaderboard rows with their inputs, and a bad
`papers.p5` section stopping with an error that names the key."""

from __future__ import annotations

import copy

import pytest

from mtp_core.config.settings import ConfigError, validate_schema
from mtp_core.papers.p5.plan import P5Plan
from mtp_core.validation import check_references, load_config
from tests.conftest import REPO


@pytest.fixture(scope="module")
def tiny():
    return load_config(REPO / "config/tiny.yaml")


def test_params_paths_and_leaderboard(tiny):
    plan = P5Plan(tiny)
    p = plan.method_params("gsm8k", "entmtp_tau")
    assert p == {
        "decoder": "entmtp",
        "heads": "results/models/p5/heads/hydra/heads",
        "policy": "binary_tau",
        "bank": "results/analysis/p5/hydra/gsm8k/bank.json",
    }
    assert plan.decode_result("gsm8k", "vanilla").endswith("prompts-p5-gsm8k/greedy.json")
    assert list(plan.job_decoders("gsm8k")) == [
        "greedy",
        "medusa_default",
        "hydra_default",
        "entmtp_static",
        "entmtp_tau",
    ]
    assert plan.job_inputs("humaneval") == [
        "results/models/p5/heads/medusa/heads",
        "results/models/p5/heads/hydra/heads",
        "results/analysis/p5/hydra/humaneval/bank.json",
    ]
    rows = plan.leaderboard()
    assert [r.label for r in rows] == ["p5-medusa_default", "p5-hydra_default", "p5-entmtp_static", "p5-entmtp_tau"]
    assert rows[3].needs == ("results/models/p5/heads/hydra/heads", "results/analysis/p5/hydra/gsm8k/bank.json")
    settings, launcher = P5Plan.resolve_training(tiny, "hydra")
    assert (
        settings["data"] == "results/data/p5/selfdistill/tiny-qwen3-math" and settings["train"]["final_dir"] == "heads"
    )
    assert settings["heads"]["arch"] == "hydra" and launcher["cluster"] == "local"
    assert plan.frontier_settings().depths == (1, 2, 3) and not plan.frontier_settings().include_greedy
    with_root = copy.deepcopy(tiny)
    with_root["papers"]["p5"]["throughput"]["include_greedy"] = True
    assert P5Plan(with_root).frontier_settings().include_greedy
    assert plan.SPLIT_REPORT == "results/prompts/p5/split_report.json"
    assert plan.split_outputs()["gsm8k_calib"] == "results/prompts/p5/gsm8k/calib.jsonl"
    held_out = {f"held_out_{ps}": f"results/prompts/{ps}.jsonl" for ps in tiny["leaderboard"]["prompt_sets"]}
    math = {f"math_{s}": f"results/data/math/{s}.jsonl" for s in ("train", "validation", "test")}
    assert plan.split_inputs() == math | (held_out if plan.s.leaderboard.methods else {})
    assert plan.selfdistill_dir() == "results/data/p5/selfdistill/tiny-qwen3-math"
    assert plan.train_record("medusa") == "results/models/p5/heads/medusa/train.json"
    assert plan.frontier_outputs()[0] == "results/analysis/p5/{heads}/humaneval/table.npz"
    assert plan.decode_outputs()[0] == "results/decode/p5/tiny-qwen3-math/prompts-p5-{task}/greedy.json"
    assert (
        plan.report_inputs("table1")["files"][-1]
        == "results/decode/p5/tiny-qwen3-math/prompts-p5-sharegpt/simulation_check.json"
    )
    assert plan.report_inputs("table2")["files"][:2] == [
        "results/analysis/p5/hydra/humaneval/search.json",
        "results/analysis/p5/hydra/humaneval/self.json",
    ]


def test_the_frontier_engine_follows_the_decoding_regime(tiny):
    """Greedy acceptance: the exact offline simulation; typical acceptance (T > 0): the paper's rollout engine under
    the same regime, which the heads methods (EntMTP's bank included) decode with; the sampling vanilla keeps its
    own temperature and is Table 1's vanilla."""
    plan = P5Plan(tiny)
    assert plan.search_engine() == "offline" and plan.frontier_job_settings()["decode"] == {}
    typical = copy.deepcopy(tiny)
    typical["papers"]["p5"]["decoding"].update(acceptance="typical", temperature=0.8)
    regime = {"acceptance": "typical", "temperature": 0.8, "posterior_threshold": 0.09, "posterior_alpha": 0.3}
    typical_plan = P5Plan(typical)
    assert typical_plan.search_engine() == "rollout"
    assert typical_plan.frontier_job_settings()["decode"] == regime
    assert typical_plan.method_params("gsm8k", "entmtp_tau") == {**plan.method_params("gsm8k", "entmtp_tau"), **regime}
    paper = P5Plan(load_config(REPO / "config/paper.yaml"))
    assert paper.search_engine() == "rollout" and paper.frontier_settings().frontier_mode == "per-depth"
    assert paper.method_params("gsm8k", "vanilla") == {"decoder": "sample", "temperature": 0.7}
    assert paper.vanilla_method() == "vanilla" and paper.decode_result("gsm8k", "vanilla").endswith("/vanilla.json")
    assert paper.table1_rows()[1]["vanilla"].endswith("prompts-p5-humaneval/vanilla.json")
    assert paper.frontier_job_settings()["max_rows"] == 90 and paper.frontier_job_settings()["engine"] == "rollout"
    assert paper.imported_heads() == ["hydra", "medusa"] and paper.section["heads"]["hydra"] == {
        "source": "hub",
        "id": "ankner/hydra-vicuna-7b-v1.3",
        "num_heads": 4,
    }


def bad(tiny, edit, message):
    cfg = copy.deepcopy(tiny)
    edit(cfg["papers"]["p5"], cfg)
    with pytest.raises(ConfigError, match=message):
        check_references(cfg)


@pytest.mark.parametrize(
    "edit,message",
    [
        (lambda s, c: s["heads"]["hydra"].update(num_heads=2), r"papers\.p5\.heads\.hydra\.num_heads: 2 heads"),
        (
            lambda s, c: s["tasks"]["humaneval"].update(test=100, calib=64),
            r"papers\.p5\.tasks\.humaneval: test \+ calib \+ train = 170 prompts exceed",
        ),
        (
            lambda s, c: s["tasks"].update(code2={"source": "humaneval", "test": 1, "calib": 1, "train": 1}),
            r"papers\.p5\.tasks\.code2: draws from the same prompts as task 'humaneval'",
        ),
        (
            lambda s, c: s["methods"]["entmtp_tau"].update(tau_on=0.1, tau_off=0.2),
            r"papers\.p5\.methods\.entmtp_tau: tau_off 0\.2 > tau_on 0\.1",
        ),
        (lambda s, c: s["scheduler"].update(hysteresis=[1.5]), r"papers\.p5\.scheduler\.hysteresis"),
        (
            lambda s, c: s["methods"]["hydra_default"].update(tree="vicuna_7b_stage9"),
            r"hydra_default\.tree: no published",
        ),
        (lambda s, c: s["methods"]["medusa_default"].update(heads="eagle"), r"medusa_default\.heads: heads 'eagle'"),
        (lambda s, c: s["methods"]["entmtp_tau"].update(heads="medusa"), r"entmtp_tau\.heads: EntMTP reads the bank"),
        (lambda s, c: s["methods"]["entmtp_tau"].update(bogus=1), r"entmtp_tau: entmtp: unknown parameter"),
        (lambda s, c: s["heads"]["medusa"]["train"].update(global_batch_size=3), r"papers\.p5\.heads\.medusa\.train"),
        (lambda s, c: s["tables"]["table1"]["methods"].append("nope"), r"tables\.table1\.methods\[5\]: method 'nope'"),
        (
            lambda s, c: s.update(model="tiny-llama"),
            r"papers\.p5\.leaderboard\.p5-medusa_default: its heads are trained from 'tiny-llama'",
        ),
        (lambda s, c: s["search"].update(budgets=[1], tolerance=0.4), r"budget 1 with tolerance 0\.4 has no window"),
        (
            lambda s, c: s["throughput"].update(max_rows=16),
            r"throughput\.max_rows: 16 rows priced, .* default tree mc_sim_7b_63 has 63: .* needs 64 rows",
        ),
        (
            lambda s, c: s["search"].update(budgets=[64]),
            r"throughput\.max_rows: 64 rows priced, but the search grows trees to 89 nodes .* needs 90 rows",
        ),
        (
            lambda s, c: s["tasks"]["gsm8k"].update(dataset="pretrain"),
            r"tasks\.gsm8k\.dataset: 'pretrain' is not a math",
        ),
        (lambda s, c: s["heads"]["medusa"].update(source="hub"), r"heads\.medusa: source hub needs `id` \(hub\)"),
        (lambda s, c: s["search"].update(heads=["eagle"]), r"p5\.search\.heads\[0\]: heads 'eagle' is not declared"),
        (lambda s, c: s["figures"]["fig3"]["tasks"].append("x"), r"p5\.figures\.fig3\.tasks\[3\]: task 'x' is not"),
        (lambda s, c: s["figures"]["fig1"].update(task="x"), r"p5\.figures\.fig1\.task: task 'x' is not declared"),
        (lambda s, c: s["leaderboard"].update(task="x"), r"p5\.leaderboard\.task: task 'x' is not declared"),
    ],
)
def test_bad_sections_name_the_key(tiny, edit, message):
    bad(tiny, edit, message)


def test_the_schema_asks_a_math_task_for_its_dataset_and_the_leaderboard_for_its_task(tiny):
    for edit in (lambda s: s["tasks"]["gsm8k"].pop("dataset"), lambda s: s["leaderboard"].pop("task")):
        cfg = copy.deepcopy(tiny)
        edit(cfg["papers"]["p5"])
        with pytest.raises(ConfigError, match=r"'(dataset|task)' is a required property"):
            validate_schema(cfg)
