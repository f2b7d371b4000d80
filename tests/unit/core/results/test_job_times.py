"""mtp_core.results.job_times: per-paper sums of Snakemake benchmark files (the embedded budget, results pages)."""

from __future__ import annotations

import json

import pytest

from mtp_core.results import job_times

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


def row_result(results, prompt_set: str, name: str, paper: str, wall: float) -> None:
    path = results / "decode/leaderboard/m" / f"prompts-{prompt_set}" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"paper": paper, "decode_stats": {"wall_s": wall}}))


def test_leaderboard_rows_charged_to_their_papers(tmp_path):
    bench(tmp_path / "benchmarks/leaderboard/decode/math.tsv", 100, 180, rss=700)
    bench(tmp_path / "benchmarks/p1/train/main.tsv", 60, 120)
    for name, paper, wall in [
        ("greedy", "base", 10),
        ("pld", "base", 10),
        ("p1-main-k2", "p1", 20),
        ("p3-x", "p3", 40),
    ]:
        row_result(tmp_path, "math", name, paper, wall)
    jobs = job_times.split_leaderboard(job_times.job_times(tmp_path), tmp_path)
    by_group = job_times.summary(jobs, "group")
    # 100 s split 20 : 20 : 40 over base (the leaderboard), p1 and p3; the CPU seconds in the same shares
    assert by_group.loc["leaderboard", "wall_min"] == round(25 / 60, 1) and by_group.loc["p3", "wall_min"] == 0.8
    assert by_group.loc["p1", "wall_min"] == round((60 + 25) / 60, 1) and by_group.loc["p1", "jobs"] == 2
    assert by_group.loc["p3", "cpu_min"] == round(180 * 0.5 / 60, 1) and by_group.loc["p3", "max_rss_mb"] == 700
    assert by_group.loc["total", "jobs"] == 2 and by_group.loc["total", "wall_min"] == pytest.approx(2.6)
    assert jobs["wall_s"].sum() == pytest.approx(160)


def test_leaderboard_rows_missing_named(tmp_path):
    bench(tmp_path / "benchmarks/leaderboard/decode/specbench.tsv", 100, 180)
    with pytest.raises(ValueError, match="prompts-specbench/: no row results"):
        job_times.split_leaderboard(job_times.job_times(tmp_path), tmp_path)
