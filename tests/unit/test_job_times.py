"""benchmarks/job_times.py: per-paper sums of Snakemake benchmark files (the embedded budget in the README)."""

from __future__ import annotations

import importlib.util

import pytest

from ..conftest import REPO

spec = importlib.util.spec_from_file_location("job_times", REPO / "benchmarks/job_times.py")
job_times = importlib.util.module_from_spec(spec)
spec.loader.exec_module(job_times)

HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def bench(path, seconds: float, cpu: float, rss: float = 100.0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + f"{seconds}\t0:00:00\t{rss}\t0\t0\t0\t0\t0\t50\t{cpu}\n")


def test_groups_and_sums(tmp_path):
    root = tmp_path / "benchmarks"
    bench(root / "p4/train/main.tsv", 600, 1100, rss=900)
    bench(root / "p4/evaluate/main/tau3.tsv", 120, 200)
    bench(root / "finetune_model/m.tsv", 1200, 2000)
    bench(root / "data/prepare_math/math.tsv", 6, 5)
    bench(root / "decode_prompts/m/code.tsv", 60, 90)
    jobs = job_times.job_times(tmp_path)
    by_group = job_times.summary(jobs, "group")
    assert by_group.loc["p4", "jobs"] == 2 and by_group.loc["p4", "wall_min"] == 12.0
    assert by_group.loc["p4", "cpu_min"] == round(1300 / 60, 1) and by_group.loc["p4", "max_rss_mb"] == 900
    assert by_group.loc["shared: models", "wall_min"] == 20.0 and by_group.loc["foundation", "jobs"] == 1
    assert by_group.loc["total", "jobs"] == 5 and by_group.loc["total", "wall_min"] == pytest.approx(33.1)
    by_rule = job_times.summary(jobs, "rule")
    assert set(by_rule.index) == {
        "p4/train",
        "p4/evaluate",
        "finetune_model",
        "data/prepare_math",
        "decode_prompts",
        "total",
    }


def test_empty_benchmark_file_named(tmp_path):
    path = tmp_path / "benchmarks/p1/train/main.tsv"
    path.parent.mkdir(parents=True)
    path.write_text(HEADER)
    with pytest.raises(ValueError, match="p1/train/main.tsv: no measurement row"):
        job_times.job_times(tmp_path)
