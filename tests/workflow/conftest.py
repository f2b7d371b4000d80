"""The tiny-scale `all` run, shared by every workflow test module (one run per session: it is the slow part)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..conftest import REPO

SNAKEMAKE = [sys.executable, "-m", "snakemake"]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def snakemake(workdir: Path, *args: str, check: bool = True, timeout: int = 900) -> subprocess.CompletedProcess:
    cmd = [*SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir), *args]
    proc = subprocess.run(cmd, cwd=workdir, env=ENV, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}")
    return proc


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """`snakemake -c2 all` and the report at tiny scale, once per session (foundation + paper 1); the wall time
    of the `all` run is written to `all_wall_s.txt` in the work directory."""
    work = tmp_path_factory.mktemp("tiny-all")
    shutil.copy(REPO / "config/tiny.yaml", work / "tiny.yaml")
    t0 = time.perf_counter()
    snakemake(work, "all", "--cores", "2", "--configfile", "tiny.yaml")
    (work / "all_wall_s.txt").write_text(f"{time.perf_counter() - t0:.1f}\n")
    snakemake(work, "all", "--cores", "1", "--report", "results/report.html", "--configfile", "tiny.yaml")
    return work
