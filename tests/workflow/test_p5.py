"""Paper 5 at tiny scale, in the session's shared `all` run (tests/workflow/conftest.py): the DAG of every paper-5
target, Table 1 (every method identical to greedy, the simulation predicting every decoder's forwards), the
banks (EntMTP* in the bank, τ chosen on calibration prompts), Table 2, the figures, the heads' training record,
disjoint splits; the embedded and paper DAGs; a bad `papers.p5` stopping before any job."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from mtp_core.papers.p5.plan import P5Plan
from mtp_core.validation import load_config

from ..conftest import REPO, job_counts
from .conftest import assert_bad_tiny_config_stops

JOBS = {
    "p5_split": 1,
    "p5_selfdistill": 1,
    "p5_train": 2,
    "p5_frontier": 1,
    "p5_decode": 3,
    "p5_table": 2,
    "p5_figures": 1,
}


def test_dry_run_of_every_p5_target(dry_run):
    counts = job_counts(dry_run("config/tiny.yaml", "papers"))
    assert {k: counts.get(k) for k in JOBS} == JOBS


def test_table1_every_method_lossless_and_simulated(tiny_run):
    res = tiny_run / "results"
    data = pd.read_csv(res / "tables/p5/table1.csv")
    assert list(dict.fromkeys(data["method"])) == [
        "Vanilla",
        "Medusa (default)",
        "Hydra (default)",
        "EntMTP*",
        "EntMTPτ",
    ]
    assert len(data) == 15 and (data["identical"] == 1.0).all() and (data["tok/s"] > 0).all()
    heads_rows = data[data["method"] != "Vanilla"]
    assert heads_rows["simulated = actual"].all()  # the offline simulation predicted every prompt's forwards
    assert (data.loc[data["method"] == "Vanilla", "× vanilla"] == 1.0).all()
    assert (heads_rows["drafted nodes/step"] > 0).all()
    assert (data.loc[data["method"] == "Medusa (default)", "drafted nodes/step"] == 63).all()
    r = json.loads((res / "decode/p5/tiny-qwen3-math/prompts-p5-gsm8k/entmtp_tau.json").read_text())
    assert r["paper"] == "p5" and r["decoder"]["name"] == "entmtp" and r["decoder"]["lossless"]
    assert r["decoder"]["params"]["bank"] == "results/analysis/p5/hydra/gsm8k/bank.json"
    assert r["metrics"]["accuracy"]["value"] is not None  # the math test prompts carry their answers


def test_banks_and_frontiers(tiny_run):
    res = tiny_run / "results/analysis/p5/hydra"
    for task in ("humaneval", "gsm8k", "sharegpt"):
        bank = json.loads((res / task / "bank.json").read_text())
        assert bank["best"] in bank["trees"] and bank["conservative"] in bank["trees"]
        assert bank["order"] and bank["tau_off"] <= bank["tau_on"] and "calibration" in bank["chosen_on"]
        thr = json.loads((res / task / "throughput.json").read_text())
        assert thr["best"] == bank["best"] and thr["hull"] == bank["order"]
        assert max(r["modeled_tokens_per_s"] for r in thr["rows"] if r.get("biased") is not None) == pytest.approx(
            next(r for r in thr["rows"] if r["id"] == bank["best"])["modeled_tokens_per_s"]
        )
        search = json.loads((res / task / "search.json").read_text())
        assert set(search["per_depth_history"]) == {"1", "2", "3"} and search["per_cell_winners"]
        assert (res / task / "regimes.csv").is_file()
    t2 = pd.read_csv(tiny_run / "results/tables/p5/table2.csv")
    assert set(t2["task"]) == {"HumanEval", "GSM8K (synthetic)", "ShareGPT"}
    assert ((t2["self"] - t2["biased"] - t2["Δ (self - biased)"]).abs() < 1e-9).all()
    for f in P5Plan.FIGURES:
        assert (tiny_run / f"results/figures/p5/{f}.png").read_bytes()[:4] == b"\x89PNG"


def test_heads_training_record_and_disjoint_splits(tiny_run):
    res = tiny_run / "results"
    rec = json.loads((res / "models/p5/heads/hydra/train.json").read_text())
    assert rec["steps"] == 3 and len(rec["result"]["heads_accuracy"]["top1"]) == 4
    meta = json.loads((res / "models/p5/heads/hydra/heads/heads.json").read_text())
    assert meta["arch"] == "hydra" and meta["trunk"]["name"] == "tiny-qwen3-math"
    for task in ("humaneval", "gsm8k", "sharegpt"):
        ids = {}
        for split in ("test", "calib", "train"):
            rows = [json.loads(line) for line in (res / f"prompts/p5/{task}/{split}.jsonl").read_text().splitlines()]
            ids[split] = {r["prompt"] for r in rows}
        assert not (ids["test"] & ids["calib"] or ids["test"] & ids["train"] or ids["calib"] & ids["train"])


@pytest.mark.parametrize("config", ["config.yaml", "config/paper.yaml"])
def test_dry_run_dag_other_scales(config, dry_run):
    plan = P5Plan(load_config(REPO / config))
    counts = job_counts(dry_run(config, "papers"))
    assert counts["p5_frontier"] == len(plan.search_heads()) == 1
    assert counts["p5_decode"] == 3 and counts["p5_table"] == 2
    trained = len(plan.trained_heads())
    assert counts.get("p5_train", 0) == trained and counts.get("p5_import_heads", 0) == 2 - trained


def test_bad_p5_config_stops_before_any_job(tmp_path):
    assert_bad_tiny_config_stops(
        tmp_path,
        "arch: hydra\n        num_heads: 4",
        "arch: hydra\n        num_heads: 2",
        "papers.p5.heads.hydra.num_heads: 2 heads, fewer than the search depth 3",
    )
