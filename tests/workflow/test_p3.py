"""Paper 3 at tiny scale: the DAG of every paper-3 target, Table 1 and Figure 2 of the tiny `all` (their decoding
jobs and the alignment analysis) with the table's contents, the embedded and paper DAGs, and a bad config stopping
before any job."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from mtp_core.papers.p3.plan import P3Plan
from mtp_core.validation import load_config

from ..conftest import REPO, job_counts
from .conftest import assert_bad_tiny_config_stops

TARGETS = ["results/tables/p3/table1.csv", "results/figures/p3/fig2.png"]


@pytest.fixture(scope="session")
def p3_run(tiny_run):
    """Table 1 and Figure 2 of paper 3 at tiny scale: the tiny `all` builds them."""
    assert all((tiny_run / t).is_file() for t in TARGETS)
    return tiny_run


def test_dry_run_of_every_p3_target(dry_run):
    cfg = load_config(REPO / "config/tiny.yaml")
    counts = job_counts(dry_run("config/tiny.yaml", "papers"))
    assert counts["p3_decode"] == len(P3Plan(cfg).decode_jobs()) == 8
    assert counts["p3_table"] == 4 and counts["p3_figure"] == 3 and counts["p3_alignment"] == 1


def test_table1_contents(p3_run):
    res = p3_run / "results"
    data = pd.read_csv(res / "tables/p3/table1.csv")
    assert data["title"].tolist() == ["Greedy (reference)", "PLD", "LADE", "STAND", "Ours"]
    for bc in (10, 30, 60):
        tau = data[f"BC{bc} τ (tokens/forward, incl. bonus)"]
        assert (tau >= 1.0).all() and tau.iloc[0] == 1.0
        assert (data[f"BC{bc} identical"] == 1.0).all()  # every method is lossless
        assert (data[f"BC{bc} tok/s"] > 0).all() and data[f"BC{bc} × greedy"].iloc[0] == 1.0
    md = (res / "tables/p3/table1.md").read_text()
    assert "incl. bonus" in md and "Greedy (reference)" in md
    r = json.loads((res / "decode/p3/tiny-llama/prompts-specbench/probing-bc60.json").read_text())
    assert (r["paper"], r["run"], r["task"]) == ("p3", "tiny-llama", "specbench")
    assert r["decoder"]["name"] == "probing" and r["decoder"]["params"]["masks_per_step"] == 2
    assert r["decode_stats"]["identical_fraction"] == 1.0 and r["n"] == 8
    assert set(r["per_category"]) >= {"coding", "math_reasoning", "translation"}
    g = json.loads((res / "decode/p3/tiny-llama/prompts-specbench/pld-greedy.json").read_text())
    assert g["decoder"]["name"] == "greedy" and g["decode_stats"]["tokens_per_forward"]["mean"] == 1.0


def test_fig2_analysis(p3_run):
    res = p3_run / "results"
    assert (res / "figures/p3/fig2.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads((res / "analysis/p3/tiny-llama/alignment.json").read_text())
    assert summary["sequence_argmax_reproduces_greedy"] == 1.0 and summary["masks"] > 0
    frame = pd.read_csv(res / "analysis/p3/tiny-llama/alignment.csv")
    assert sorted(frame["layer"].unique()) == [0, 1, 2]  # embeddings + the tiny model's 2 layers


@pytest.mark.parametrize("config", ["config.yaml", "config/paper.yaml"])
def test_dry_run_dag_other_scales(config, dry_run):
    cfg = load_config(REPO / config)
    counts = job_counts(dry_run(config, "papers"))
    jobs = P3Plan(cfg).decode_jobs()
    assert counts["p3_decode"] == len(jobs)
    assert counts["p3_table"] == 4


def test_bad_p3_config_stops_before_any_job(tmp_path):
    assert_bad_tiny_config_stops(
        tmp_path,
        "pruning: {methods: [probing, probing_noprune]",
        "pruning: {methods: [probing, nope]",
        "papers.p3.tables.pruning.methods[1]: method 'nope' is not declared",
    )
