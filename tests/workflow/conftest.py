"""The tiny-scale `all` run, shared by every workflow test module (one run per session: it is the slow part)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
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


def assert_bad_tiny_config_stops(tmp_path: Path, old: str, new: str, message: str) -> None:
    """config/tiny.yaml with `old` replaced by `new` makes `snakemake all` fail with `message`, before any job."""
    text = (REPO / "config/tiny.yaml").read_text()
    bad = text.replace(old, new)
    assert bad != text, f"{old!r} is not in config/tiny.yaml"
    (tmp_path / "bad.yaml").write_text(bad)
    proc = snakemake(tmp_path, "all", "-c1", "--configfile", str(tmp_path / "bad.yaml"), check=False)
    assert proc.returncode != 0
    assert message in proc.stdout + proc.stderr
    assert not (tmp_path / "results").exists()


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """`snakemake -c2 all` and the report at tiny scale, once per session (foundation, five papers, leaderboard); the wall time
    of the `all` run is written to `all_wall_s.txt` in the work directory."""
    work = tmp_path_factory.mktemp("tiny-all")
    shutil.copy(REPO / "config/tiny.yaml", work / "tiny.yaml")
    t0 = time.perf_counter()
    snakemake(work, "all", "--cores", "2", "--configfile", "tiny.yaml", timeout=5400)  # 106 jobs (beside the rehearsal)
    (work / "all_wall_s.txt").write_text(f"{time.perf_counter() - t0:.1f}\n")
    snakemake(work, "all", "--cores", "1", "--report", "results/report.html", "--configfile", "tiny.yaml")
    return work


def paper_targets() -> list[str]:
    """Every table and figure of papers 2-5 (in `all` or one command away), by their plans."""
    from mtp_core.papers.p2.plan import P2Plan
    from mtp_core.papers.p3.plan import P3Plan
    from mtp_core.papers.p4.plan import P4Plan
    from mtp_core.papers.p5.plan import P5Plan

    return [f for p in (P2Plan, P3Plan, P4Plan, P5Plan) for n in (*p.TABLES, *p.FIGURES) for f in p.target_files(n)]


@pytest.fixture(scope="session")
def dry_run(tmp_path_factory) -> Callable[[str, str], str]:
    """`dry_run(config, what)`: the output of `snakemake -n` of `all` (what="all") or of every table and figure of
    papers 2-5 (what="papers") at the scale of `config` (relative to the repository), once per session: each
    planning is ~10 s, and the tests of several modules read the same one."""
    outputs: dict[tuple[str, str], str] = {}

    def plan(config: str, what: str) -> str:
        if (config, what) not in outputs:
            targets = {"all": ["all"], "papers": paper_targets()}[what]
            proc = snakemake(tmp_path_factory.mktemp("dry-run"), *targets, "-n", "--configfile", str(REPO / config))
            outputs[config, what] = proc.stdout + proc.stderr
        return outputs[config, what]

    return plan
