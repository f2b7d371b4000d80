"""Fixtures of the real-Slurm integration tests (marker `slurm`).

They need the single-node CI cluster of tests/slurm/start.sh (partition `debug`, account `ci`, accounting through
slurmdbd, 4 fake GPUs). `make test` and `make test-slurm` run pytest through tests/slurm/with_cluster.sh, which
starts it (installing Debian's packages when missing) and stops it afterwards. Where no such cluster answers, the
tests skip with the reason; MTP_SLURM_REQUIRED=1 turns that skip into a failure.

Tests of the training launcher (mtp_core.train.launch) on this cluster (training through Snakemake,
checkpoint/requeue after preemption, re-attaching after Snakemake is killed) belong in tests/slurm/test_launcher.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

PARTITION = "debug"
ACCOUNT = "ci"


def run(*cmd: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def _wait_for_background_start() -> str | None:
    """The reason the background start of tests/slurm/with_cluster.sh --background failed, once it has ended."""
    status = os.environ.get("MTP_SLURM_START_STATUS")
    if not status:
        return None
    deadline = time.monotonic() + float(os.environ.get("MTP_SLURM_START_TIMEOUT", 900))
    while not os.path.exists(status):
        if time.monotonic() > deadline:
            return f"the background start of the cluster did not finish (log: {os.environ.get('MTP_SLURM_START_LOG')})"
        time.sleep(0.5)
    rc = Path(status).read_text().strip()
    if rc == "0":
        return None
    reason_file = os.environ.get("MTP_SLURM_START_REASON", "")
    if rc == "3" and os.path.exists(reason_file) and Path(reason_file).read_text().strip():
        return Path(reason_file).read_text().strip()
    return f"tests/slurm/start.sh failed (exit {rc}; log: {os.environ.get('MTP_SLURM_START_LOG')})"


def _unavailable_reason() -> str | None:
    """Why the CI cluster cannot be used here, or None when it answers."""
    if os.environ.get("MTP_SLURM_UNAVAILABLE"):
        return os.environ["MTP_SLURM_UNAVAILABLE"]
    reason = _wait_for_background_start()
    if reason:
        return reason
    if shutil.which("sinfo") is None:
        return (
            "Slurm is not installed (sinfo not on PATH); `make test-slurm` (root, Debian/Ubuntu) installs and "
            "starts a single-node cluster"
        )
    try:
        proc = run("sinfo", "-h", "-o", "%P %a", timeout=20, check=False)
    except subprocess.TimeoutExpired:
        return "sinfo timed out: no Slurm controller answers (start one with tests/slurm/start.sh)"
    if proc.returncode != 0:
        return f"no Slurm controller answers (start one with tests/slurm/start.sh): {proc.stderr.strip()}"
    partitions = {line.split()[0].rstrip("*") for line in proc.stdout.splitlines() if line.strip()}
    if PARTITION not in partitions:
        return f"the running Slurm is not the CI cluster of tests/slurm/start.sh (no partition {PARTITION!r})"
    if run("sacct", "-X", "-n", "-S", "now", timeout=20, check=False).returncode != 0:
        return "Slurm accounting (sacct/slurmdbd) does not answer; tests/slurm/start.sh starts slurmdbd"
    return None


_REASON: list = []


@pytest.fixture(scope="session")
def slurm_cluster() -> None:
    """The running CI cluster; skips (or fails with MTP_SLURM_REQUIRED=1) where there is none."""
    if not _REASON:
        _REASON.append(_unavailable_reason())
    reason = _REASON[0]
    if reason is None:
        return
    if os.environ.get("MTP_SLURM_REQUIRED") == "1":
        pytest.fail(f"MTP_SLURM_REQUIRED=1 but no usable Slurm: {reason}")
    pytest.skip(f"no Slurm: {reason}")


def sacct_jobs(job_ids=None, name: str | None = None, until=None, wait_s: float = 30) -> list[dict[str, str]]:
    """Allocations (`sacct -X`) of these job ids or this job name, once each is in a final state and
    `until(rows)` holds. slurmdbd records asynchronously: a job can first appear as a placeholder named
    'allocation' (when its step record arrives first), or not at all."""
    fields = ["JobIDRaw", "JobName", "Comment", "State", "ExitCode", "AllocTRES"]
    cmd = ["sacct", "-X", "-n", "-P", "-a", "-S", "now-1days", "--format", ",".join(fields)]
    if job_ids:
        cmd += ["-j", ",".join(str(j) for j in job_ids)]
    if name:
        cmd += ["--name", name]
    final = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED"}
    deadline = time.monotonic() + wait_s
    while True:
        rows = [dict(zip(fields, line.split("|"))) for line in run(*cmd).stdout.splitlines() if line.strip()]
        done = bool(rows) and all(r["State"].split()[0] in final and r["JobName"] != "allocation" for r in rows)
        if job_ids:
            done = done and len(rows) >= len(job_ids)
        if until is not None:
            done = done and until(rows)
        if done or time.monotonic() > deadline:
            return rows
        time.sleep(0.5)
