"""submitit on the CI cluster: a function submitted with AutoExecutor(cluster="slurm") returns its result, and
submitit's watcher (which reads sacct) sees the job COMPLETED."""

from __future__ import annotations

import sys

import cloudpickle
import pytest

from .conftest import ACCOUNT, PARTITION, sacct_jobs

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("slurm_cluster")]

# This test module is not importable inside the job (pytest puts its root on sys.path, not on PYTHONPATH):
# pickle its functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def add(a: int, b: int) -> dict:
    import os

    return {"sum": a + b, "job_id": os.environ.get("SLURM_JOB_ID"), "account": os.environ.get("SLURM_JOB_ACCOUNT")}


def test_submitit_round_trip(tmp_path):
    import submitit

    executor = submitit.AutoExecutor(folder=tmp_path / "%j", cluster="slurm")
    executor.update_parameters(
        name="mtp-submitit-ci",
        timeout_min=5,
        mem_gb=1,
        cpus_per_task=1,
        slurm_partition=PARTITION,
        slurm_account=ACCOUNT,
    )
    job = executor.submit(add, 2, 3)
    result = job.result()
    assert result == {"sum": 5, "job_id": job.job_id, "account": ACCOUNT}
    # slurmdbd records asynchronously: wait for the final accounting row before asking submitit's watcher
    (row,) = sacct_jobs([job.job_id])
    assert row["JobName"] == "mtp-submitit-ci" and row["State"] == "COMPLETED", row
    assert job.watcher.get_state(job.job_id, mode="force") == "COMPLETED"
