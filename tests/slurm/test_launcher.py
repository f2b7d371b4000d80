"""The training launcher (`python -m mtp_core.cli train`) on the CI cluster of tests/slurm/start.sh:

* checkpoint/requeue: a running training job (DDP over 2 Slurm tasks, through submitit's
  TorchDistributedEnvironment and gloo) is preempted with submitit's `job._interrupt()` (scancel --signal SIGTERM,
  then USR2, as a preemption sends them); the ranks agree to stop at the next step boundary and save, rank 0
  requeues the job (`scontrol requeue`, same job id) while rank 1 waits to be killed, Slurm starts it again
  (SLURM_RESTART_COUNT=1), it resumes from that step and ends with the same final step and the same weights, bit
  for bit, as an uninterrupted 2-process run; sacct shows the requeued and the completed run of the one job;
* Snakemake killed during training (SIGKILL to Snakemake, its shell and the launcher), then `snakemake --unlock`
  and a rerun: the launcher re-attaches to the running job and the rule finishes without a second submission
  (checked in sacct by the job's unique name). The training rule is a minimal local rule written into a
  temporary workflow (the same command the pipeline's training rules run).

The method is `toy` (the generic loop on a small MLP: a run is one `import torch` plus seconds), so the time goes to
Slurm itself: a requeue waits for AuthInfo=cred_expire (10 s on the CI cluster) and the scheduler interval.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import torch

from mtp_core.train.launch import interrupt_job, launch
from tests.unit.core.train.test_launch import _attempts, _curves, _wait_for_step

from ..toy_method import TOY
from ..unit.ranks import run_ranks
from .conftest import ACCOUNT, PARTITION, sacct_jobs

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("slurm_cluster"), pytest.mark.timeout(600)]

TRAIN = {
    "max_steps": 30,
    "global_batch_size": 8,
    "micro_batch_size": 2,
    "lr": 0.02,
    "warmup_steps": 2,
    "checkpoint_every": 10,
    "progress": False,
    "log_every": 5,
}


def _launcher(name: str, **kw) -> dict:
    return {
        "cluster": "slurm",
        "partition": PARTITION,
        "account": ACCOUNT,
        "timeout_min": 5,
        "mem_gb": 1,
        "cpus_per_task": 1,
        "threads": 1,
        "name": name,
        "poll_s": 2.0,
        "progress_s": 10.0,
        **kw,
    }


def test_preempted_job_requeues_resumes_and_matches_uninterrupted(tmp_path):
    settings = {"train": TRAIN, "step_sleep_s": 0.15}
    name = f"mtp-ci-preempt-{uuid.uuid4().hex[:8]}"
    out = tmp_path / "pre" / "train.json"
    box: dict = {}

    def run():
        try:
            box["result"] = launch(out, TOY, settings, _launcher(name, tasks_per_node=2))
        except BaseException as e:
            box["error"] = e

    t0 = time.monotonic()
    thread = threading.Thread(target=run)
    thread.start()
    at = _wait_for_step(out.parent, 5, timeout=180)
    t_int = time.monotonic()
    job_id = interrupt_job(out)  # submitit's SlurmJob._interrupt(): scancel --signal SIGTERM, then USR2
    thread.join(420)
    assert not thread.is_alive(), "the launcher is still waiting"
    assert "error" not in box, box.get("error")
    res = box["result"]
    t_end = time.monotonic()

    a = _attempts(out.parent)
    assert [x["status"] for x in a] == ["preempted", "completed"] and {x["job_id"] for x in a} == {job_id}
    assert [x["slurm_restart_count"] for x in a] == [None, "1"]
    assert all(x["world_size"] == 2 and x["strategy"] == "ddp" and x["backend"] == "gloo" for x in a)
    stopped, resumed = a[0]["end_step"], a[1]["start_step"]
    assert at <= stopped < TRAIN["max_steps"] and resumed == stopped  # no finished step lost
    assert res["steps"] == TRAIN["max_steps"] and res["resumed_from"] == stopped and res["job_id"] == job_id
    requeue_gap = a[1]["started_at"] - a[0]["ended_at"]
    print(
        f"slurm preemption: interrupted at step >= {at}, stopped at {stopped}, resumed from {resumed} "
        f"(steps lost: {stopped - resumed}, interval {TRAIN['checkpoint_every']}); requeue gap {requeue_gap:.1f} s; "
        f"launch -> interrupt {t_int - t0:.1f} s, interrupt -> done {t_end - t_int:.1f} s"
    )

    # accounting: one job, requeued once (sacct -D shows the requeued run and the completed one)
    rows = sacct_jobs(name=name)
    assert {r["JobIDRaw"] for r in rows} == {job_id} and rows[0]["State"] == "COMPLETED", rows
    cost = json.loads(out.with_name("train.json.cost.json").read_text())
    (entry,) = cost["jobs"]
    assert entry["state"] == "COMPLETED" and entry["requeues"] == 1, entry
    assert [r["State"].split()[0] for r in entry["sacct"]] == ["REQUEUED", "COMPLETED"], entry["sacct"]
    log = (out.parent / "train.json.submitit" / job_id / f"{job_id}_0_log.out").read_text()
    assert "Calling checkpoint method" in log and f"Requeued job {job_id}" in log

    # the same final weights and curve as an uninterrupted 2-process DDP run (forked here, one thread each)
    ref = tmp_path / "ref"
    run_ranks(2, _toy_ddp, tmp_path, {**settings, "step_sleep_s": 0.0}, ref)
    w, w_ref = (torch.load(d / "model" / "model.pt", weights_only=True) for d in (out.parent, ref))
    assert all(torch.equal(w[k], w_ref[k]) for k in w_ref)
    assert _curves(out.parent) == _curves(ref)


def _toy_ddp(rank, world, settings, run_dir):
    from mtp_core.train import DDPDist

    from ..toy_method import toy_entry

    toy_entry(settings, run_dir, dist=DDPDist(), device=torch.device("cpu"))


SNAKEFILE = """\
import json

LAUNCHER = json.loads({launcher!r})
SETTINGS = json.loads({settings!r})

rule all:
    input: "results/train/toy/main/train.json"

rule train:
    output: "results/train/toy/{{run}}/train.json"
    log: "results/logs/train/toy/{{run}}.log"
    localrule: True
    resources: submitit_jobs=1
    params:
        launcher=json.dumps(LAUNCHER),
        settings=json.dumps(SETTINGS),
    shell:
        "{python} -m mtp_core.cli train --output {{output}} --method tests.toy_method:METHOD "
        "--run-dir results/train/toy/{{wildcards.run}} "
        "--settings {{params.settings:q}} --launcher {{params.launcher:q}} 2> {{log}}"
"""


def _snakemake(work: Path, *args: str, **kw) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(work / "Snakefile"),
        "--directory",
        str(work),
        "--cores",
        "2",
        "--resources",
        "submitit_jobs=1",
        "--rerun-incomplete",
        *args,
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.Popen(
        cmd,
        cwd=work,
        env=env,
        stdout=kw.pop("stdout", subprocess.PIPE),
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        **kw,
    )


def test_snakemake_killed_then_rerun_reattaches_without_second_submission(tmp_path):
    name = f"mtp-ci-reattach-{uuid.uuid4().hex[:8]}"
    work = tmp_path / "wf"
    work.mkdir()
    launcher = _launcher(name)
    settings = {"train": {**TRAIN, "max_steps": 60}, "step_sleep_s": 0.3}  # long enough to outlive the restart
    (work / "Snakefile").write_text(
        SNAKEFILE.format(launcher=json.dumps(launcher), settings=json.dumps(settings), python=sys.executable)
    )
    out = work / "results/train/toy/main/train.json"
    run_dir = out.parent
    log = work / "results/logs/train/toy/main.log"

    first = _snakemake(work)
    try:
        _wait_for_step(run_dir, 3, timeout=180)
    except AssertionError as e:
        first.kill()
        log_text = log.read_text() if log.exists() else ""
        raise AssertionError(f"{first.communicate()[0]}\n--- launcher log ---\n{log_text}") from e
    job_id = json.loads(out.with_name("train.json.job.json").read_text())["job_id"]
    os.killpg(first.pid, signal.SIGKILL)  # Snakemake, its shell and the launcher; the Slurm job keeps running
    first.wait()
    assert not out.exists()
    state = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True).stdout.strip()
    assert state in ("RUNNING", "PENDING", "COMPLETING"), state

    unlock = _snakemake(work, "--unlock")  # the killed run left its lock
    text = unlock.communicate(timeout=120)[0]
    assert unlock.returncode == 0, text
    t0 = time.monotonic()
    rerun = _snakemake(work)
    text = rerun.communicate(timeout=420)[0]
    launcher_log = log.read_text()
    assert rerun.returncode == 0, f"{text}\n--- launcher log ---\n{launcher_log}"
    line = next((x for x in launcher_log.splitlines() if f"re-attaching to job {job_id}" in x), None)
    assert line is not None, launcher_log
    print(f"snakemake rerun after the kill: {time.monotonic() - t0:.1f} s; {line}")
    result = json.loads(out.read_text())
    assert result["job_id"] == job_id and result["steps"] == 60
    job = json.loads(out.with_name("train.json.job.json").read_text())
    assert [s["job_id"] for s in job["submissions"]] == [job_id]
    rows = sacct_jobs(name=name)
    assert [r["JobIDRaw"] for r in rows] == [job_id] and rows[0]["State"] == "COMPLETED", rows  # one submission
    a = [json.loads(line) for line in (run_dir / "attempts.jsonl").read_text().splitlines()]
    assert [x["status"] for x in a] == ["completed"]
