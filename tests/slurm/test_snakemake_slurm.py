"""The pipeline on the CI cluster through the `slurm/` profile and the CI overlay:

    snakemake --profile slurm --profile tests/slurm/ci --configfile config/tiny.yaml <targets>

run from the repository root (as users type it) with --directory a temporary dir. Every data and decoding rule
must run as its own Slurm job (checked in sacct through the plugin's job comment `rule_<rule>_wildcards_<wc>`),
and the GPU rules must get a GPU (AllocTRES gres/gpu=1, CUDA_VISIBLE_DEVICES in the job environment).

Training runs through the launcher: `p1_train` is a local rule whose command (`python -m mtp_core.cli train`)
submits the training as a submitit Slurm job of its own and waits for it (`launcher={cluster: slurm}`: the
profile's `config` entry, repeated here because a `--config` on the command line replaces the profile's).

To keep the Slurm stage within its CI budget, the default targets are one decoding result, one evaluation result
and paper 1's main training, all of the tiny Llama (`--config evaluation={"model": "tiny-llama"}` and the same
for the leaderboard and every paper with leaderboard rows): prepare_model, prepare_prompts and prepare_math, then decode_prompts and evaluate on a
GPU each and the training job; 5 rule jobs + 1 training job in two waves, about 2 min on 2 busy cores.
MTP_SLURM_TEST_TARGETS=all runs the whole tiny `all` instead (~6 min on 2 busy cores).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from ..conftest import REPO
from .conftest import sacct_jobs

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("slurm_cluster")]

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
TRAIN_RECORD = "results/models/p1/main/train.json"
DEFAULT_TARGETS = [
    "results/decode/base/tiny-llama/prompts-code/greedy.json",
    "results/decode/base/tiny-llama/synthetic_math_cot/greedy.json",
    TRAIN_RECORD,
]
# one prepared model for both GPU rules and the training: one Slurm job less in the first wave
DEFAULT_OVERRIDE = [
    'evaluation={"model": "tiny-llama"}',
    # every paper that puts rows on the leaderboard trains from the leaderboard's model, or its rows would not compare
    'papers={"p1": {"model": "tiny-llama"}, "p2": {"model": "tiny-llama"}, "p4": {"model": "tiny-llama"}, '
    '"p5": {"model": "tiny-llama"}}',
    'leaderboard={"model": "tiny-llama"}',
]
LAUNCHER_OVERRIDE = "launcher={cluster: slurm}"
GPU_RULES = {"decode_prompts", "evaluate"}


@pytest.fixture(scope="module")
def slurm_run(tmp_path_factory):
    work = tmp_path_factory.mktemp("smk-slurm")
    targets = os.environ.get("MTP_SLURM_TEST_TARGETS", "").split()
    override = ["--config", LAUNCHER_OVERRIDE, *([] if targets else DEFAULT_OVERRIDE)]
    targets = targets or DEFAULT_TARGETS
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "--profile",
        "slurm",
        "--profile",
        "tests/slurm/ci",
        "--snakefile",
        str(REPO / "Snakefile"),
        "--directory",
        str(work),
        "--configfile",
        str(REPO / "config/tiny.yaml"),
        *override,
        "--verbose",
        "--",
        *targets,
    ]
    log = work / "snakemake.log"
    t0 = time.monotonic()
    with log.open("w") as fh:
        proc = subprocess.run(cmd, cwd=REPO, env=ENV, stdout=fh, stderr=subprocess.STDOUT, timeout=900)
    text = log.read_text()
    print(f"snakemake on Slurm: {time.monotonic() - t0:.1f} s")
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}:\n{text[-8000:]}")
    run_names = set(re.findall(r"sbatch call: sbatch --parsable --job-name (\S+)", text))
    assert len(run_names) == 1, run_names  # the plugin names every job of a run by the run's id
    job_ids = re.findall(r"has been submitted with SLURM jobid (\d+)", text)
    rows = sacct_jobs(job_ids)
    assert sorted(r["JobIDRaw"] for r in rows) == sorted(job_ids), rows
    assert all(r["JobName"] == next(iter(run_names)) for r in rows), rows
    return work, targets, text, rows


def _rule(row: dict) -> str:
    m = re.match(r"rule_(\w+?)_wildcards_", row["Comment"])
    assert m, f"job {row['JobIDRaw']} has no rule comment: {row}"
    return m.group(1)


def test_rules_ran_as_slurm_jobs(slurm_run):
    work, targets, _, rows = slurm_run
    for t in targets if targets != ["all"] else ["results/tables/base/decoding.csv"]:
        assert (work / t).is_file(), t
    rules = [_rule(r) for r in rows]
    assert {"prepare_model", "prepare_prompts", "prepare_math", "decode_prompts", "evaluate"} <= set(rules), rows
    comments = [r["Comment"] for r in rows]
    assert len(comments) == len(set(comments)), comments  # no job ran twice
    assert all(r["State"] == "COMPLETED" and r["ExitCode"] == "0:0" for r in rows), rows
    assert "p1_train" not in rules  # a local rule: its launcher submitted the training
    res = json.loads((work / "results/decode/base/tiny-llama/prompts-code/greedy.json").read_text())
    assert res["scale"] == "tiny" and res["n"] > 0


def test_training_ran_through_the_launcher(slurm_run):
    work, _, _, _ = slurm_run
    record = json.loads((work / TRAIN_RECORD).read_text())
    assert record["cluster"] == "slurm" and record["steps"] == record["result"]["steps"] > 0, record
    assert (work / "results/models/p1/main/model/config.json").is_file()
    rows = sacct_jobs([record["job_id"]])
    assert len(rows) == 1 and rows[0]["State"] == "COMPLETED" and rows[0]["JobName"] == "train-p1-main", rows
    assert record["cost"]["state"] == "COMPLETED" and record["cost"]["elapsed_s"] > 0, record["cost"]


def test_gpu_rules_got_a_gpu(slurm_run):
    work, _, text, rows = slurm_run
    for r in rows:
        rule = _rule(r)
        assert ("gres/gpu=1" in r["AllocTRES"]) == (rule in GPU_RULES), r
    # the sbatch flags of the profile's GPU resources (gpu: 1, cpus_per_gpu: 1 in the CI overlay)
    gpu_calls = [line for line in text.splitlines() if re.search(r"--comment rule_(decode_prompts|evaluate)_", line)]
    assert gpu_calls and all("--gpus=1" in c and "--cpus-per-gpu=1" in c for c in gpu_calls), gpu_calls[:1]
    # the job environment (printed by the jobstep under --verbose; successful logs are kept by the CI overlay)
    for rule in GPU_RULES:
        logs = list((work / ".snakemake/slurm_logs").glob(f"rule_{rule}/*/*.log"))
        assert logs, rule
        for path in logs:
            assert re.search(r"'CUDA_VISIBLE_DEVICES': '[01]'", path.read_text()), path


# Checkpoint/requeue after preemption and re-attaching after Snakemake is killed: tests/slurm/test_launcher.py.
