"""The CI cluster itself: sbatch, srun, GPU gres, accounting."""

from __future__ import annotations

import pytest

from .conftest import ACCOUNT, PARTITION, run, sacct_jobs

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("slurm_cluster")]


def test_sbatch_and_srun(tmp_path):
    out = tmp_path / "out.txt"
    proc = run(
        "sbatch",
        "--parsable",
        "--wait",
        "-p",
        PARTITION,
        "-A",
        ACCOUNT,
        "-t",
        "2",
        "--mem",
        "100",
        "-o",
        str(out),
        "--wrap",
        'echo "hi from $SLURM_JOB_ID"; srun -n1 hostname >/dev/null',
    )
    job_id = proc.stdout.strip().split(";")[0]
    assert out.read_text().strip() == f"hi from {job_id}"
    assert run("srun", "-p", PARTITION, "-n1", "-t", "1", "--mem", "100", "printenv", "SLURM_JOB_ID").stdout.strip()
    (row,) = sacct_jobs([job_id])
    assert row["State"] == "COMPLETED" and row["ExitCode"] == "0:0", row


def test_gpu_job_gets_cuda_visible_devices(tmp_path):
    out = tmp_path / "gpu.txt"
    proc = run(
        "sbatch",
        "--parsable",
        "--wait",
        "-p",
        PARTITION,
        "-t",
        "2",
        "--mem",
        "100",
        "--gpus=2",
        "-c",
        "2",
        "-o",
        str(out),
        "--wrap",
        'echo "CVD=${CUDA_VISIBLE_DEVICES:-unset}"',
    )
    assert out.read_text().strip() == "CVD=0,1"
    (row,) = sacct_jobs([proc.stdout.strip()])
    assert "gres/gpu=2" in row["AllocTRES"], row
    # more GPUs than the node has (start.sh: MTP_SLURM_GPUS, 4 by default): refused at submission, not queued forever
    gpus = int(run("sinfo", "-h", "-o", "%G").stdout.strip().split(":")[-1].split("(")[0])
    too_many = run("sbatch", "-p", PARTITION, f"--gpus={gpus + 1}", "--wrap", "true", check=False)
    assert too_many.returncode != 0 and "node configuration is not available" in too_many.stderr
