"""Paper 3's experiment plan (mtp_core.papers.p3.plan.P3Plan) and its tables and figures (mtp_core.papers.p3.report) from synthetic
result JSONs."""

from __future__ import annotations

import copy
from pathlib import Path

import pandas as pd
import pytest
import yaml

from mtp_core.config.settings import ConfigError
from mtp_core.data.prompts import first_per_category
from mtp_core.papers.p3.figures import alignment_figure, category_figure
from mtp_core.papers.p3.plan import P3Plan
from mtp_core.papers.p3.report import REFERENCE_TITLE, p3_table
from mtp_core.results import load_results, write_table
from mtp_core.results.write import make_result, write_result
from mtp_core.validation import load_config, validate_config
from tests.conftest import REPO

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CATS = ("coding", "writing")


def decode_result(path: Path, decoder: str, params: dict, tau: float, tps: float, identical: float) -> str:
    stats = {
        "tokens_per_forward": {"mean": tau, "std": 0.3, "pooled": tau, "pooled_se": 0.1},
        "effective_k": {"mean": tau, "std": 0.1},
        "new_tokens": {"mean": 10.0, "std": 0.0, "total": 40},
        "forward_passes": int(40 / tau),
        "tokens_per_s": tps,
        "wall_s": 40 / tps,
        "identical_fraction": identical,
    }
    per_cat = {
        c: {**stats, "tokens_per_forward": {"mean": tau + 0.1 * i, "std": 0.0, "pooled": tau + 0.1 * i}}
        for i, c in enumerate(CATS)
    }
    write_result(
        str(path),
        make_result(
            kind="decode",
            paper="p3",
            run="m",
            model="m",
            task="specbench",
            decoder={"name": decoder, "lossless": True, "params": params},
            n=4,
            decode_stats=stats,
            per_category=per_cat,
            settings={},
            scale="tiny",
            config_hash="0" * 12,
        ),
    )
    return str(path)


@pytest.fixture(scope="module")
def tiny_cfg() -> dict:
    return load_config(REPO / "config/tiny.yaml")


def write_experiment(cfg: dict, name: str, tmp: Path) -> list[dict]:
    """Synthetic results for every file experiment `name` reads: τ grows with BC, greedy at 50 tok/s."""
    settings = P3Plan(cfg).experiment_settings(name)
    for s in settings:
        for path, is_ref in ((s["path"], False), (s["reference"], True)):
            p = tmp / path
            p.parent.mkdir(parents=True, exist_ok=True)
            if is_ref:
                decode_result(p, "greedy", {}, 1.0, 50.0, 1.0)
            else:
                decode_result(p, s["params"]["decoder"], s["params"], 1.0 + s["bc"] / 100, 40.0 + s["bc"], 1.0)
    return [{**s, "path": str(tmp / s["path"]), "reference": str(tmp / s["reference"])} for s in settings]


def test_plan_jobs_settings_and_files(tiny_cfg):
    plan = P3Plan(tiny_cfg)
    jobs = {(j.model, j.method): j.bcs for j in plan.decode_jobs()}
    assert jobs[("tiny-llama", "probing")] == (10, 30, 60)
    assert jobs[("tiny-llama", "probing_m2")] == (10, 30, 60)  # every job runs every BC (one rule)
    dec = plan.job_decoders("tiny-llama", "probing")
    assert list(dec) == ["greedy", "probing-bc10", "probing-bc30", "probing-bc60"]
    assert dec["probing-bc60"] == {"decoder": "probing", "strategy": "prompt_mean", "bc": 60, "masks_per_step": 2}
    assert dec["probing-bc30"]["bc"] == 30 and "masks_per_step" not in dec["probing-bc30"]
    assert plan.setting_params("pld", 30) == {"decoder": "prompt-lookup", "num_draft": 29}
    assert [f.rsplit("/", 1)[1] for f in plan.decode_outputs("tiny-llama", "probing")] == [
        "probing-greedy.json",
        "probing-bc10.json",
        "probing-bc30.json",
        "probing-bc60.json",
    ]
    files = plan.experiment_results("pruning")
    assert "results/decode/p3/tiny-llama/prompts-specbench/probing_noprune-bc30.json" in files
    assert "results/decode/p3/tiny-llama/prompts-specbench/probing_noprune-greedy.json" in files
    assert len(files) == len(set(files))
    assert P3Plan.target_files("fig2") == ["results/figures/p3/fig2.png", "results/figures/p3/fig2.pdf"]


def test_first_per_category():
    rows = [{"id": i, "category": c} for i, c in enumerate("aabbbac")]
    assert [r["id"] for r in first_per_category(rows, 2)] == [0, 1, 2, 3, 6]
    assert len(first_per_category(rows, None)) == 7


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda s: s["tables"]["table1"]["methods"].append("nope"),
            "papers.p3.tables.table1.methods[4]: method 'nope'",
        ),
        (lambda s: s["methods"]["pld"].update(decoder="nope"), "papers.p3.methods.pld.decoder: unknown decoder"),
        (lambda s: s["figures"]["fig4"].update(model="other"), "papers.p3.figures.fig4.model: model 'other'"),
        (lambda s: s.update(prompt_set="nope"), "papers.p3.prompt_set: prompt set 'nope'"),
        (lambda s: s["figures"]["fig2"].update(probing={"strategy": "x"}), "papers.p3.figures.fig2.probing.strategy"),
    ],
)
def test_check_names_the_bad_key(tiny_cfg, edit, message):
    cfg = copy.deepcopy(tiny_cfg)
    edit(cfg["papers"]["p3"])
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        validate_config(cfg)


def test_schema_catches_typos_and_fills_defaults(tiny_cfg):
    s = tiny_cfg["papers"]["p3"]
    assert s["batch_size"] == 1 and s["per_category"] is None and s["methods"]["probing"]["bc_param"] == "bc"
    cfg = copy.deepcopy(tiny_cfg)
    cfg["papers"]["p3"]["tables"]["table1"]["bc"] = [10]
    with pytest.raises(ConfigError, match="bc"):
        validate_config(cfg)


def test_table1_layout(tiny_cfg, tmp_path):
    settings = write_experiment(tiny_cfg, "table1", tmp_path)
    table = p3_table(
        "table1", load_results(list(dict.fromkeys(p for s in settings for p in (s["path"], s["reference"])))), settings
    )
    d = table.data
    assert d["title"].tolist() == [REFERENCE_TITLE, "PLD", "LADE", "STAND", "Ours"]
    tau = "BC30 τ (tokens/forward, incl. bonus)"
    assert d.loc[d["title"] == "Ours", tau].item() == pytest.approx(1.3)
    assert d.loc[d["title"] == "Ours", "BC60 × greedy"].item() == pytest.approx(100 / 50)
    assert d.loc[d["title"] == REFERENCE_TITLE, "BC10 tok/s"].item() == pytest.approx(50.0)
    assert (d["BC10 identical"] == 1.0).all()
    write_table(table, tmp_path / "t1")
    md = (tmp_path / "t1.md").read_text()
    assert "incl. bonus" in md and "1.30 ± 0.10" in md and "Greedy (reference)" in md
    assert "BC30 τ se" in pd.read_csv(tmp_path / "t1.csv").columns


def test_table2_rows_carry_masks_and_branching(tiny_cfg, tmp_path):
    settings = write_experiment(tiny_cfg, "table2", tmp_path)
    frame = load_results(list(dict.fromkeys(p for s in settings for p in (s["path"], s["reference"]))))
    d = p3_table("table2", frame, settings).data
    assert d[["masks", "branching"]].values.tolist() == [[2, "dynamic"], [2, "fixed"]]
    assert list(d.columns[:4]) == ["model", "masks", "branching", "title"]
    assert REFERENCE_TITLE not in d["title"].tolist()


def test_category_and_alignment_figures(tiny_cfg, tmp_path):
    settings = write_experiment(tiny_cfg, "fig4", tmp_path)
    frame = load_results(list(dict.fromkeys(p for s in settings for p in (s["path"], s["reference"]))))
    long = category_figure(frame, settings, tmp_path / "f4.png", tmp_path / "f4.pdf")
    assert (tmp_path / "f4.png").read_bytes()[:8] == PNG_MAGIC and (tmp_path / "f4.pdf").read_bytes()[:4] == b"%PDF"
    assert sorted(set(long["category"])) == sorted(CATS) and len(long) == len(settings) * len(CATS)
    curves = pd.DataFrame(
        {
            "layer": [0, 1, 0, 1],
            "outcome": ["accepted"] * 2 + ["rejected"] * 2,
            "mean": [0.1, 0.8, 0.1, 0.3],
            "std": [0.1, 0.1, None, 0.2],
            "n": [2, 2, 5, 5],
        }
    )
    alignment_figure(curves, tmp_path / "f2.png", tmp_path / "f2.pdf")
    assert (tmp_path / "f2.png").read_bytes()[:8] == PNG_MAGIC


def test_bc_accounting_rows_or_nodes():
    """§3.3 counts every row of a verification forward; §4 counts draft nodes: a method then runs BC + 1 rows,
    probing (BC + 1) x (1 + masks)."""
    raw = yaml.safe_load((REPO / "config/tiny.yaml").read_text())
    rows = validate_config(copy.deepcopy(raw))
    raw["papers"]["p3"]["bc_accounting"] = "nodes"
    nodes = validate_config(raw)
    assert P3Plan(rows).setting_params("pld", 30)["num_draft"] == 29
    assert P3Plan(nodes).setting_params("pld", 30)["num_draft"] == 30
    assert P3Plan(rows).setting_params("probing", 30)["bc"] == 30
    assert P3Plan(nodes).setting_params("probing", 30)["bc"] == 62  # 31 rows, each with its mask
    assert P3Plan(nodes).setting_params("probing", 60)["bc"] == 183  # two masks at BC 60: 61 x 3
    assert P3Plan(nodes).setting_params("stand", 10)["bc"] == 11
