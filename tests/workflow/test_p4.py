"""Paper 4 in the tiny-scale `all` run (the session's shared run, tests/workflow/conftest.py): Tables 3-5 and Figures
4-5 with their contents, the result files of every label, the τ choice, the DAG of every paper-4 target at the three
scales, and a bad config stopping before any job."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from mtp_core.papers.p4.plan import P4Plan
from mtp_core.validation import load_config

from ..conftest import REPO, job_counts
from .conftest import assert_bad_tiny_config_stops


def test_tables_and_figures_in_all(tiny_run):
    res = tiny_run / "results"
    t5 = pd.read_csv(res / "tables/p4/table5.csv")
    assert t5["row"].tolist() == ["Vanilla", "3→1", "3→3", "untrained E0D1 (τ=3)"]
    assert (t5["TF acc (val) n"] == 8).all() and (t5["math (test) n"] == 4).all()
    assert t5["PLT"].round(3).tolist() == [1.0, 1.0, 0.667, 0.667]  # E0D1 of 2 layers
    assert t5["TF acc@2"].notna().tolist() == [False, False, True, True]  # offset 2 exists at τ 3 only
    assert 0.5 <= t5["PLT (measured)"].iloc[2] <= 1.0  # the prefill counts as a cycle start; rows may stop early
    t3 = pd.read_csv(res / "tables/p4/table3.csv")
    assert t3["row"].tolist() == ["Vanilla", "MTD1 (twin)", "MTD3"]
    assert t3["PLT (measured)"].round(3).tolist() == [1.0, 1.0, round((4 * 2 + 8 * 1) / (2 * 12), 3)]
    assert (t3["Batch=1 tok/s"] > 0).all() and t3["Batch=1 ×"].iloc[0] == 1.0 and "Batch=2 × modeled" in t3
    t4 = pd.read_csv(res / "tables/p4/table4.csv")
    assert t4[["block", "row"]].values.tolist() == [["tiny-qwen3-math", "Vanilla"], ["tiny-qwen3-math", "Ours"]]
    for fig in ("fig4", "fig5"):
        assert (res / f"figures/p4/{fig}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fit = json.loads((res / "analysis/p4/fig5_fit.json").read_text())
    assert set(fit["runs"]) == {"E0D1 MTD3"}
    assert "Paper 4" in (res / "report.html").read_text(errors="replace")


def test_result_files(tiny_run):
    res = tiny_run / "results/decode/p4"
    tf = json.loads((res / "main/tf-math/dmtd-tau3.json").read_text())
    assert tf["kind"] == "eval" and tf["paper"] == "p4" and tf["run"] == "main" and tf["n"] == 8
    assert {"tf_acc,none", "tf_acc@2,none", "tf_ce@0,train_schedule"} <= set(tf["metrics"])
    assert tf["settings"]["split"] == "E0D1" and tf["settings"]["plt"] == pytest.approx(2 / 3)
    gen = json.loads((res / "main@step0/synthetic_math_cot/dmtd-tau3.json").read_text())
    assert gen["decoder"]["params"] == {"tau": 3, "encoding_layers": 0, "decoding_layers": 1, "combine": "add"}
    assert gen["decode_stats"]["tokens_per_forward"]["mean"] == 1.0 and gen["n"] == 4
    speed = json.loads((res / "main/speed-b2/dmtd-tau3.json").read_text())
    assert speed["settings"]["batch_size"] == 2 and "load_1min" in speed["settings"]
    assert speed["decode_stats"]["new_tokens"]["total"] == 2 * 12  # no stop criteria
    model = json.loads((tiny_run / "results/models/p4/main/model/config.json").read_text())
    assert model["dmtd"] == {"encoding_layers": 0, "decoding_layers": 1, "combine": "add", "cycle": 3, "version": 1}


def test_dry_run_of_every_p4_target(dry_run):
    cfg = load_config(REPO / "config/tiny.yaml")
    counts = job_counts(dry_run("config/tiny.yaml", "papers"))
    assert counts["p4_train"] == len(P4Plan(cfg).s.runs) == 3
    jobs = sum(len(t) for t in P4Plan(cfg).label_taus().values())  # one per (label, τ), one per start model
    assert counts["p4_evaluate"] == jobs == 5 and counts["p4_vanilla"] == 1
    assert counts["p4_table"] == 5 and counts["p4_speed"] == 1 and counts["p4_figure"] == counts["p4_figure5"] == 1


@pytest.mark.parametrize(("config", "trainings", "choices"), [("config.yaml", 1, 1), ("config/paper.yaml", 14, 0)])
def test_dry_run_dag_other_scales(config, trainings, choices, dry_run):
    counts = job_counts(dry_run(config, "all"))
    assert counts["p4_train"] == trainings and counts["p4_speed"] == 1 and counts.get("p4_select_tau", 0) == choices
    every = job_counts(dry_run(config, "papers"))  # Table 1 (not in `all`) and Table 2 are one command away
    assert every["p4_train"] == len(P4Plan(load_config(REPO / config)).s.runs)


def test_bad_p4_config_stops_before_any_job(tmp_path):
    assert_bad_tiny_config_stops(
        tmp_path,
        "method: {decoding_layers: 1, cycle: 3,",
        "method: {decoding_layers: 2, cycle: 3,",
        "papers.p4.runs.main.method (merged with papers.p4.method): encoding_layers + decoding_layers = 0 + 2",
    )
