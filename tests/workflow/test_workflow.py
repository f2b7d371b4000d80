"""The Snakemake workflow: the whole tiny-scale `all` DAG in a temporary directory (outputs, report,
re-run is a no-op, bad config stops before any job), dry-runs of the embedded and paper configs, lint."""

from __future__ import annotations

import json
import re
import subprocess

import pandas as pd
import pytest
import yaml

from ..conftest import REPO
from .conftest import ENV, SNAKEMAKE, snakemake


def test_tiny_all_writes_every_table_and_figure(tiny_run):
    res = tiny_run / "results"
    for rel in [
        "tables/base/decoding.csv",
        "tables/base/decoding.md",
        "tables/base/evaluation.csv",
        "tables/base/evaluation.md",
        "figures/base/decoding_speed.png",
        "figures/base/decoding_speed.pdf",
        "data/math/split_report.json",
        "data/pretrain/shards/index.json",
        "report.html",
    ]:
        assert (res / rel).is_file() and (res / rel).stat().st_size > 0, rel
    decoding = pd.read_csv(res / "tables/base/decoding.csv")
    assert set(decoding["prompt_set"]) == {"math", "code", "conversation", "specbench"}
    assert set(decoding["decoder"]) == {"greedy", "hf-greedy"}
    assert (decoding["tokens_per_s"] > 0).all()
    assert (decoding["tokens_per_forward"] == 1.0).all()


def test_tiny_results_are_complete_and_lossless(tiny_run):
    base = tiny_run / "results/decode/base"
    for prompt_set in ("math", "code", "conversation", "specbench"):
        res = json.loads((base / f"tiny-llama/prompts-{prompt_set}/greedy.json").read_text())
        assert res["kind"] == "decode" and res["scale"] == "tiny" and len(res["config_hash"]) == 12
        assert res["decode_stats"]["identical_to_greedy"] is True
        hf = json.loads((base / f"tiny-llama/prompts-{prompt_set}/hf-greedy.json").read_text())
        assert hf["decode_stats"]["identical_to_greedy"] is True, prompt_set
        samples = (base / f"tiny-llama/prompts-{prompt_set}/greedy.samples.jsonl").read_text().splitlines()
        assert len(samples) == res["n"] > 0
    ev = json.loads((base / "tiny-qwen3-math/synthetic_math_cot/greedy.json").read_text())
    assert ev["kind"] == "eval" and ev["n"] == 4
    assert "exact_match,flexible-extract" in ev["metrics"]
    assert ev["decode_stats"]["tokens_per_forward"]["mean"] == 1.0


def test_tiny_rerun_is_a_no_op(tiny_run):
    proc = snakemake(tiny_run, "all", "-n", "--configfile", "tiny.yaml")
    assert "Nothing to be done" in proc.stdout + proc.stderr


def test_bad_config_stops_before_any_job(tiny_run, tmp_path):
    text = (tiny_run / "tiny.yaml").read_text().replace("model: tiny-llama", "model: no-such-model", 1)
    (tmp_path / "bad.yaml").write_text(text)
    proc = snakemake(tmp_path, "all", "-c1", "--configfile", str(tmp_path / "bad.yaml"), check=False)
    assert proc.returncode != 0
    assert "decoding.model: model 'no-such-model' is not declared" in proc.stdout + proc.stderr
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("config", ["config.yaml", "config/paper.yaml"])
def test_dry_run(config, dry_run):
    out = dry_run(config, "all")
    assert "decoding_table" in out and "evaluation_table" in out
    # run from another directory, Snakemake still reads the workflow profile beside the Snakefile (greedy selector)
    assert f"Using workflow specific profile {REPO / 'profiles/default'}" in out


# The rules whose jobs time decoding (the bench protocol; paper 5's frontier measures its step prices), by hand.
TIMED_RULES = {
    "decode_prompts", "leaderboard_decode", "p2_speed_fig4", "p2_speed_fig5", "p2_speed_table8", "p3_decode",
    "p4_speed", "p5_frontier", "p5_decode",
}  # fmt: skip


def _rule_threads(out: str) -> dict[str, set[int]]:
    """Rule -> the `threads` of its jobs in a `snakemake -n -c N` output (Snakemake prints them only above 1)."""
    threads: dict[str, set[int]] = {}
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", out):
        m = re.match(r"(?:local)?rule (\w+):", block)
        if m:
            t = re.search(r"^\s+threads: (\d+)$", block, re.M)
            threads.setdefault(m.group(1), set()).add(int(t.group(1)) if t else 1)
    return threads


def test_timed_jobs_run_alone_and_the_others_side_by_side(tmp_path):
    """`snakemake -c 3 all` of config.yaml: every job that times decoding holds all 3 cores (`bench.alone`), more
    than its 2 bench threads, so nothing runs beside it; the shared fine-tune holds the 2 threads it trains on
    (its `train.threads`); every other job takes config `threads` (1), side by side. The tiny config (`bench.alone`
    false) lets the timed jobs share the cores: all its jobs take 1 thread."""
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    assert cfg["threads"] == 1 and cfg["bench"]["threads"] == 2
    assert cfg["models"]["smollm2-135m-math"]["train"]["threads"] == 2
    threads = _rule_threads(
        snakemake(tmp_path, "all", "-n", "-c", "3", "--configfile", str(REPO / "config.yaml")).stdout
    )
    timed = TIMED_RULES & set(threads)
    assert {"decode_prompts", "leaderboard_decode", "p3_decode", "p4_speed", "p5_decode", "p5_frontier"} <= timed
    assert {r: t for r, t in threads.items() if r in timed and t != {3}} == {}
    assert {r: t for r, t in threads.items() if r not in timed and t != {1}} == {"finetune_model": {2}}
    (tmp_path / "tiny").mkdir()
    tiny = snakemake(tmp_path / "tiny", "all", "-n", "-c", "2", "--configfile", str(REPO / "config/tiny.yaml")).stdout
    threads = _rule_threads(tiny)
    assert TIMED_RULES & set(threads) and {r: t for r, t in threads.items() if t != {1}} == {}


def test_lint_is_clean_except_conda():
    """`snakemake --lint` exits 1 for the conda/container lint, which cannot apply to a pip project;
    every other lint fails this test."""
    proc = subprocess.run([*SNAKEMAKE, "--lint"], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300)
    lints = [line.strip()[2:] for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("    * ")]
    other = [t for t in lints if "conda environment or container" not in t]
    assert not other, "\n".join(other)
    assert proc.returncode in (0, 1)
