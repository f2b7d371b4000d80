"""Paper 1 in the tiny-scale `all` run (the session's shared run, tests/workflow/conftest.py): every table and
figure, the sweep rows, the result files and their labels, the training outputs, the baseline reuse, the
per-run targets, resume after a kill, and the DAG of the embedded and paper configs."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from mtp_core.papers.p1.plan import P1Plan
from mtp_core.validation import load_config

from ..conftest import REPO, job_counts
from .conftest import assert_bad_tiny_config_stops, snakemake

TASK = "synthetic_math_cot"
TABLE_RUNS = {
    "table1": ["main"],
    "table2": ["main"],
    "table3": ["main"],
    "table4": ["main", "gt_supervision", "bda"],
    "table5": ["soft_teacher", "static_k16", "prefix_loss"],
}
SETTINGS = [
    "Baseline Step 0, k=1",
    "Static k=1",
    "Static k=2",
    "Static k=3",
    "Static k=4",
    "Static k=5",
    "ConfAdapt (τ = 0.9)",
    "ConfAdapt (τ = 0.5)",
]


def test_every_p1_table_and_figure(tiny_run):
    res = tiny_run / "results"
    for n in range(1, 6):
        for ext in ("csv", "md"):
            assert (res / f"tables/p1/table{n}.{ext}").stat().st_size > 0
    for n in range(5, 12):
        assert (res / f"figures/p1/fig{n}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (res / f"figures/p1/fig{n}.pdf").read_bytes()[:4] == b"%PDF"
    assert "Paper 1" in (res / "report.html").read_text(errors="replace")


@pytest.mark.parametrize("table", sorted(TABLE_RUNS))
def test_tables_hold_the_sweep_rows(tiny_run, table):
    data = pd.read_csv(tiny_run / f"results/tables/p1/{table}.csv")
    assert list(dict.fromkeys(data["run"])) == TABLE_RUNS[table]
    for run in TABLE_RUNS[table]:
        assert data.loc[data["run"] == run, "setting"].tolist() == SETTINGS
    d = data[data["run"] == TABLE_RUNS[table][0]].set_index("setting")
    assert d.loc["Static k=3", f"{TASK} Eff. k"] == 3.0  # 12 new tokens = 4 steps of 3
    assert d.loc["Static k=1", f"{TASK} Eff. k"] == 1.0 and d.loc["Baseline Step 0, k=1", f"{TASK} Eff. k"] == 1.0
    assert (data[f"{TASK} n"] == 4).all()
    md = (tiny_run / f"results/tables/p1/{table}.md").read_text()
    assert "Baseline Step 0, k=1" in md and "ConfAdapt (τ = 0.5)" in md and " ± " in md


def test_results_carry_paper_run_and_decoder(tiny_run):
    base = tiny_run / "results/decode/p1"
    r = json.loads((base / f"main/{TASK}/static-k3.json").read_text())
    assert (r["paper"], r["run"], r["model"], r["task"]) == ("p1", "main", "tiny-qwen3-math", TASK)
    assert r["decoder"]["name"] == "static-k" and r["decoder"]["params"]["k"] == 3
    c = json.loads((base / f"main/{TASK}/conf-adapt-tau0.5.json").read_text())
    assert c["decoder"]["params"]["tau"] == 0.5 and c["decoder"]["params"]["k_max"] == 4
    ck = json.loads((base / f"main@step0/{TASK}/conf-adapt-tau0.9.json").read_text())
    assert ck["run"] == "main@step0" and ck["paper"] == "p1"
    assert sorted(p.name for p in (base / f"main@step0/{TASK}").glob("*.json")) == [
        "conf-adapt-tau0.9.json",
        "static-k1.json",
        "static-k3.json",
    ]
    # the baseline reuses the foundation's greedy evaluation of the same model with the same settings
    b = json.loads((base / f"tiny-qwen3-math@step0/{TASK}/greedy.json").read_text())
    assert b["paper"] == "p1" and b["run"] == "tiny-qwen3-math@step0" and b["reused_from"].endswith("greedy.json")
    assert (base / f"tiny-qwen3-math@step0/{TASK}/greedy.samples.jsonl").stat().st_size > 0


def test_training_outputs(tiny_run):
    run = tiny_run / "results/models/p1/main"
    summary = json.loads((run / "train_summary.json").read_text())
    assert summary["steps"] == 3
    record = json.loads((run / "train.json").read_text())  # trained through the submitit launcher (local)
    assert record["cluster"] == "local" and record["steps"] == 3 and record["cost"]["state"] == "COMPLETED"
    assert json.loads((run / "train.json.job.json").read_text())["job_id"] == record["job_id"]
    assert (run / "model/config.json").is_file() and (run / "exports/step-00000000/config.json").is_file()
    curves = pd.read_csv(run / "curves.csv")
    assert curves["step"].tolist() == [1, 2, 3] and "conf@2" in curves.columns
    cfg = json.loads((run / "model/config.json").read_text())
    assert cfg["mtp_mask_token_id"] > 0
    gt = pd.read_csv(tiny_run / "results/models/p1/gt_supervision/curves.csv")
    assert "acc_teacher" not in gt.columns  # GT supervision runs no teacher
    conf = json.loads((tiny_run / "results/analysis/p1/main/confidence.json").read_text())
    assert conf["regions"] > 0 and conf["k"] == 4


def test_run_targets_and_resume(tiny_run, tmp_path):
    """A named run target is up to date after `all`; a training whose outputs are lost after its last checkpoint
    (a kill before the export) resumes from that checkpoint instead of starting again."""
    proc = snakemake(tiny_run, "p1_bda", "-n", "--configfile", "tiny.yaml")
    assert "Nothing to be done" in proc.stdout + proc.stderr
    text = (tiny_run / "tiny.yaml").read_text().replace("checkpoint_every: 0 ", "checkpoint_every: 1 ")
    (tmp_path / "tiny.yaml").write_text(text)
    (tmp_path / "results/models").mkdir(parents=True)
    (tmp_path / "results/data").symlink_to(tiny_run / "results/data")  # prepared data and base models:
    shutil.copytree(
        tiny_run / "results/models/base", tmp_path / "results/models/base"
    )  # the fine-tune and the training run
    target = "results/models/p1/main/train.json"  # the launcher's record
    snakemake(tmp_path, target, "-c1", "--configfile", "tiny.yaml")
    run = tmp_path / "results/models/p1/main"
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-00000003"]
    assert json.loads((tmp_path / target).read_text())["resumed_from"] == 0
    (tmp_path / target).unlink()
    shutil.rmtree(run / "model")
    snakemake(tmp_path, target, "-c1", "--configfile", "tiny.yaml")
    assert json.loads((tmp_path / target).read_text())["resumed_from"] == 3
    assert (run / "model/config.json").is_file()


@pytest.mark.parametrize(
    "config, scale_jobs",
    [
        ("config.yaml", {"p1_train": 1, "p1_evaluate": 1, "p1_evaluate_checkpoint": 1, "p1_confidence": 1}),
        ("config/paper.yaml", {"p1_train": 8, "chat_rows": 2}),  # chat rows: Magpie (p1), AM-Thinking (p4)
    ],
)
def test_dry_run_dag(config, scale_jobs, dry_run):
    counts = job_counts(dry_run(config, "all"))
    for rule, n in scale_jobs.items():
        assert counts.get(rule) == n, (rule, counts)
    cfg = load_config(REPO / config)
    assert counts.get("p1_table") == sum(1 for t in P1Plan(cfg).in_all() if t.startswith("table"))


def test_ablation_table_target_at_embedded_scale(tmp_path):
    """Table 4 is a target of its own at embedded scale: it trains main and the two ablations of its blocks."""
    proc = snakemake(tmp_path, "results/tables/p1/table4.csv", "-n", "--configfile", str(REPO / "config.yaml"))
    out = proc.stdout + proc.stderr
    assert "p1_train" in out and "wildcards: run=gt_supervision" in out and "wildcards: run=bda" in out


def test_bad_p1_config_stops_before_any_job(tmp_path):
    assert_bad_tiny_config_stops(
        tmp_path,
        "runs: [main, gt_supervision, bda]",
        "runs: [main, gt_supervision, nope]",
        "papers.p1.tables.table4.runs[2]: run 'nope' is not declared",
    )
