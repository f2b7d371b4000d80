"""The rehearsal of the paper scale where our users run it: from an empty results directory,

    snakemake --profile slurm --profile tests/slurm/ci all --configfile config/paper.yaml config/rehearsal.yaml

on the CI cluster (tests/slurm/ci only adds the cluster's partition, account and CI-sized resources). The paper
DAG at rehearsal sizes (README "Paper scale"): every non-local rule a Slurm job of its own (a GPU for the GPU
rules), every training a Slurm job of 2 processes under its configured FSDP2 submitted by its launcher, every
table and figure of the paper config built and well formed, and one training (paper 1's main run) interrupted
on purpose as a preemption does it (SIGTERM, then USR2), requeued and resumed. Checkpoint/requeue of the launcher
alone and re-attaching after Snakemake is killed: tests/slurm/test_launcher.py.
"""

from __future__ import annotations

import copy
import csv
import json
import math
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from snakemake.utils import update_config

from mtp_core.config.plan import launcher_settings
from mtp_core.train.launch import interrupt_job

from ..conftest import REPO
from .conftest import sacct_jobs

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("slurm_cluster"), pytest.mark.timeout(5400)]

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
KILLED = "results/models/p1/main/train.json"  # the training interrupted on purpose

# Every table and figure builder of the paper config (its `all`), written out by hand.
TABLES = (
    ["base/decoding", "base/evaluation", "leaderboard"]
    + [f"p1/table{i}" for i in range(1, 6)]
    + [f"p2/table{i}" for i in range(1, 9)]
    + ["p3/table1", "p3/table2", "p3/pruning", "p3/strategies"]
    + [f"p4/table{i}" for i in range(1, 6)]
    + ["p5/table1", "p5/table2"]
)
FIGURES = (
    ["base/decoding_speed", "leaderboard"]
    + [f"p1/fig{i}" for i in range(5, 12)]
    + [f"p2/fig{i}" for i in (3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14)]
    + ["p3/fig2", "p3/fig4", "p3/fig5"]
    + ["p4/fig4", "p4/fig5"]
    + [f"p5/fig{i}" for i in range(1, 6)]
)
# Every decoder the paper config names (results record it as `decoder.name`).
DECODERS = {
    "greedy", "hf-greedy", "static-k", "conf-adapt", "mtp-spec", "greedy-uncached", "prompt-lookup", "lookahead",
    "stand", "probing", "dmtd", "vanilla", "sample", "medusa", "hydra", "entmtp",
}  # fmt: skip
# The rules the CI overlay gives a GPU (the Slurm profile's `gpu: 1` rules, CI-sized).
GPU_RULES = {r for r, res in yaml.safe_load((REPO / "tests/slurm/ci/config.yaml").read_text())["set-resources"].items()
             if res.get("gpu")}  # fmt: skip


def _yaml(name: str) -> dict:
    return yaml.safe_load((REPO / name).read_text())


def _steps(curves: Path) -> list[int]:
    with curves.open() as f:
        return [int(r["step"]) for r in csv.DictReader(f)]


def _interrupt_once_training(work: Path, stop: threading.Event, out: dict) -> None:
    """Interrupt the KILLED training once it has written its second step: its first step's callbacks have run
    (checkpoint_every 1), so the signal is caught inside the loop; one that lands before them requeues from the
    newest state, as a preemption before the first step does (tests/unit/core/train/test_launch.py)."""
    record, curves = work / KILLED, (work / KILLED).parent / "curves.csv"
    while not stop.is_set():
        job = Path(f"{record}.job.json")
        if job.is_file() and curves.is_file() and len(_steps(curves)) >= 2:
            try:
                out["job_id"] = interrupt_job(record)
                out["at_step"] = _steps(curves)[-1]
            except Exception as e:  # the test then fails on the missing interruption, naming this
                out["error"] = repr(e)
            return
        time.sleep(0.1)


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    work = tmp_path_factory.mktemp("rehearsal")
    cmd = [
        sys.executable, "-m", "snakemake", "--profile", "slurm", "--profile", "tests/slurm/ci",
        "--snakefile", str(REPO / "Snakefile"), "--directory", str(work), "all",
        "--configfile", str(REPO / "config/paper.yaml"), str(REPO / "config/rehearsal.yaml"),
        "--verbose",  # the sbatch calls and each job's environment in the logs
    ]  # fmt: skip
    log = work / "snakemake.log"
    stop, interrupted = threading.Event(), {}
    watcher = threading.Thread(target=_interrupt_once_training, args=(work, stop, interrupted), daemon=True)
    t0 = time.monotonic()
    with log.open("w") as fh:
        proc = subprocess.Popen(cmd, cwd=REPO, env=ENV, stdout=fh, stderr=subprocess.STDOUT)
        watcher.start()
        try:
            rc = proc.wait(timeout=5100)
        finally:
            stop.set()
            if proc.poll() is None:
                proc.kill()
    print(f"rehearsal on Slurm: {time.monotonic() - t0:.0f} s")
    if rc != 0:
        raise AssertionError(f"the rehearsal exited {rc}:\n{log.read_text()[-8000:]}")
    return work, interrupted


def test_a_second_run_has_nothing_to_do(rehearsal):
    """The same command again: nothing reruns (no input set, code or parameter differs on a second look)."""
    work, _ = rehearsal
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(work), "-n",
           "all", "--configfile", str(REPO / "config/paper.yaml"), str(REPO / "config/rehearsal.yaml")]  # fmt: skip
    out = subprocess.run(cmd, cwd=REPO, env=ENV, capture_output=True, text=True, check=True).stdout
    assert "Nothing to be done" in out, out[-4000:]


def test_every_table_and_figure_is_built_and_well_formed(rehearsal):
    """Every table: rows and columns, a markdown twin, no NaN or inf written out, a number in every row (the
    hyperparameter listing of paper 2's Table 3 aside: its rows may hold flags), and at least one column with a
    number in every row. Blank cells are allowed: a parameter that does not apply to a row (k of a ConfAdapt row),
    a spread of one prompt, or a ratio to a zero score of the random stand-ins (pandas writes NaN as blank)."""
    work, _ = rehearsal
    built = {str(p.relative_to(work / "results/tables"))[: -len(".csv")] for p in work.glob("results/tables/**/*.csv")}
    assert built >= set(TABLES), sorted(set(TABLES) - built)
    for name in TABLES:
        with (work / f"results/tables/{name}.csv").open() as f:
            rows = list(csv.DictReader(f))
        assert rows and len(rows[0]) >= 2, name
        markdown = (work / f"results/tables/{name}.md").read_text()
        assert markdown.strip() and not {"nan", "inf", "-inf"} & set(markdown.lower().replace("|", " ").split()), name
        cells = [v for r in rows for v in r.values()]
        assert not [v for v in cells if (v or "").strip().lower() in ("nan", "inf", "-inf", "none", "null")], name
        if name != "p2/table3":
            assert all(any(_is_number(v) for v in r.values()) for r in rows), name
            assert any(all(_is_number(r[c]) for r in rows) for c in rows[0]), name
    for name in FIGURES:
        for ext in ("png", "pdf"):
            assert (work / f"results/figures/{name}.{ext}").stat().st_size > 1000, (name, ext)


def _is_number(text: str | None) -> bool:
    try:
        return math.isfinite(float(text))
    except (TypeError, ValueError):
        return False


def test_every_training_ran_its_configured_strategy_on_two_processes(rehearsal):
    work, _ = rehearsal
    paper = _yaml("config/paper.yaml")
    merged = copy.deepcopy(paper)
    update_config(merged, _yaml("config/rehearsal.yaml"))
    records = sorted(work.glob("results/models/p*/*/train.json"))
    assert {r.parent.parent.name for r in records} == {"p1", "p2", "p4"}, records
    for path in records:
        p, run = path.parent.parent.name, path.parent.name
        rec = json.loads(path.read_text())
        want = launcher_settings(paper, p, run)
        size = launcher_settings(merged, p, run)
        attempts = rec["attempts"]
        assert attempts and attempts[-1]["status"] == "completed", (path, attempts)
        for a in attempts:
            assert a["cluster"] == "slurm" and a["strategy"] == want["strategy"] == "fsdp", (path, a)
            assert a["world_size"] == size["nodes"] * size["tasks_per_node"] == 2, (path, a)
            assert a["backend"] == "gloo" and a["device"] == "cpu", (path, a)


def test_the_interrupted_training_resumed_and_finished(rehearsal):
    work, interrupted = rehearsal
    assert "job_id" in interrupted, f"the training was never interrupted: {interrupted}"
    rec = json.loads((work / KILLED).read_text())
    attempts = rec["attempts"]
    assert [a["status"] for a in attempts][0] == "preempted" and attempts[-1]["status"] == "completed", attempts
    assert attempts[-1]["start_step"] >= 1 and attempts[-1]["slurm_restart_count"] == "1", attempts
    assert {a["job_id"] for a in attempts} == {interrupted["job_id"]}  # requeued: the same Slurm job
    steps = _steps(work / KILLED.replace("train.json", "curves.csv"))
    assert steps == list(range(1, rec["result"]["steps"] + 1)), steps  # every step once: resumed, not restarted


def test_every_decoder_of_the_paper_config_ran_with_the_papers_sampling(rehearsal):
    work, _ = rehearsal
    results = [json.loads(p.read_text()) for p in work.glob("results/decode/**/*.json")]
    names = {r["decoder"]["name"] for r in results if isinstance(r.get("decoder"), dict)}
    assert names >= DECODERS, sorted(DECODERS - names)
    p5 = _yaml("config/paper.yaml")["papers"]["p5"]["decoding"]
    sampled = [r for r in results if r.get("paper") == "p5" and r["decoder"]["name"] in ("medusa", "hydra", "entmtp")]
    assert sampled
    for r in sampled:
        params = r["decoder"]["params"]
        assert params["acceptance"] == p5["acceptance"] == "typical", params
        assert params["temperature"] == p5["temperature"] == 0.7, params


def _rule(row: dict) -> str:
    m = re.match(r"rule_(\w+?)_wildcards_|rule_(\w+)$", row["Comment"])
    assert m, f"job {row['JobIDRaw']} has no rule comment: {row}"
    return m.group(1) or m.group(2)


def test_every_rule_job_ran_once_on_slurm_and_the_gpu_rules_got_a_gpu(rehearsal):
    """Each non-local rule is one Slurm job of the run (the plugin names them by the run's id and comments them
    `rule_<rule>_wildcards_<wc>`), none ran twice, all completed; exactly the GPU rules asked for and got a GPU
    (sbatch flags, AllocTRES, CUDA_VISIBLE_DEVICES in the job environment)."""
    work, _ = rehearsal
    text = (work / "snakemake.log").read_text()
    run_names = set(re.findall(r"sbatch call: sbatch --parsable --job-name (\S+)", text))
    assert len(run_names) == 1, run_names
    job_ids = re.findall(r"has been submitted with SLURM jobid (\d+)", text)
    rows = sacct_jobs(job_ids)
    assert sorted(r["JobIDRaw"] for r in rows) == sorted(job_ids), rows
    assert all(r["JobName"] == next(iter(run_names)) for r in rows), rows
    assert all(r["State"] == "COMPLETED" and r["ExitCode"] == "0:0" for r in rows), rows
    comments = [r["Comment"] for r in rows]
    assert len(comments) == len(set(comments)), comments
    rules = {_rule(r) for r in rows}
    assert {"prepare_model", "prepare_prompts", "prepare_math", "decode_prompts", "evaluate", "p5_decode"} <= rules
    assert not rules & {"p1_train", "p2_train", "p4_train", "hub_model"}, rules  # local rules
    assert GPU_RULES & rules, (GPU_RULES, rules)
    for r in rows:
        assert ("gres/gpu=1" in r["AllocTRES"]) == (_rule(r) in GPU_RULES), r
    gpu_calls = [line for line in text.splitlines() if "sbatch call:" in line and "--gpus=1" in line]
    assert gpu_calls and all("--cpus-per-gpu=1" in c for c in gpu_calls), gpu_calls[:1]
    gpus = int(re.search(r"gpu:(\d+)", subprocess.run(["sinfo", "-h", "-o", "%G"], capture_output=True,
                                                      text=True, check=True).stdout).group(1))  # fmt: skip
    for rule in GPU_RULES & rules:
        logs = list((work / ".snakemake/slurm_logs").glob(f"rule_{rule}/**/*.log"))
        assert logs, rule
        for path in logs:
            seen = re.search(r"'CUDA_VISIBLE_DEVICES': '(\d+)'", path.read_text())
            assert seen and int(seen.group(1)) < gpus, path


def test_every_training_was_its_launchers_slurm_job(rehearsal):
    """The training rules are local: each one's launcher submitted the training as a Slurm job named
    train-<paper>-<run>, which completed, and its record holds the job's cost from sacct."""
    work, _ = rehearsal
    for path in sorted(work.glob("results/models/p*/*/train.json")):
        rec = json.loads(path.read_text())
        p, run = path.parent.parent.name, path.parent.name
        assert rec["cluster"] == "slurm" and rec["steps"] == rec["result"]["steps"] > 0, (path, rec)
        assert any((path.parent / "model").iterdir()), path
        rows = sacct_jobs([rec["job_id"]])
        assert len(rows) == 1 and rows[0]["JobName"] == f"train-{p}-{run}", rows
        assert rows[0]["State"] == "COMPLETED" and rec["cost"]["state"] == "COMPLETED", (rows, rec["cost"])
        assert rec["cost"]["elapsed_s"] > 0, rec["cost"]
