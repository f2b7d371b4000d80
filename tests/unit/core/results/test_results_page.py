"""mtp_core.results.page: a run's dated page (provenance, job cost per group, every table verbatim, the
figures), checked against a hand-built results directory whose numbers are worked out here."""

from __future__ import annotations

import json
import re

import pytest

from mtp_core.results import page as rp

from .test_core_usage import LOG

HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
TABLES = {
    "base/decoding": "| decoder | tok/s |\n|---|---|\n| greedy | 41.5 |",
    "p1/table1": "| run | GSM8K |\n|---|---|\n| main | 0.25 |",
    "p1/table2": "| run | BBH |\n|---|---|\n| qwen | 0.5 |",
    "p1/table10": "| run | τ |\n|---|---|\n| main | 1.75 |",
}


@pytest.fixture
def results(tmp_path):
    root = tmp_path / "results"
    for name, md in TABLES.items():
        (root / "tables" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "tables" / f"{name}.md").write_text(md + "\n")
    for job, wall, cpu in [
        ("p1/train/main", 120, 150),
        ("p1/evaluate/main/gsm8k", 60, 60),
        ("decode_prompts/m/code", 30, 45),
    ]:
        path = root / "benchmarks" / f"{job}.tsv"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(HEADER + f"{wall}\t0:00:00\t500\t0\t0\t0\t0\t0\t50\t{cpu}\n")
    for name in ("greedy", "hf-greedy"):
        path = root / "decode/base/m/prompts-code" / f"{name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"scale": "tiny", "decoder": {"name": name}}))
    (root / "figures/p1").mkdir(parents=True)
    (root / "figures/p1/fig5.png").write_bytes(b"png")
    return root


def cost_row(page: str, group: str) -> list[str]:
    row = next(line for line in page.splitlines() if re.match(rf"\|\s*{re.escape(group)}\s*\|", line))
    return [c.strip() for c in row.strip("|").split("|")]


def test_page_holds_provenance_cost_tables_and_figures(results):
    scale = rp.run_scale(results)
    page = rp.results_page(results, "make run", date="2026-11-27", commit="abc1234", where="2 cores", scale=scale)
    assert page.startswith("# Results of a run at tiny scale, 2026-11-27\n")
    for cell in ("| command | `make run` |", "| commit | abc1234 |", "| machine | 2 cores |", "| scale | tiny |"):
        assert cell in page
    # group, jobs, wall min, CPU min, peak RSS: p1 = (120 + 60) s and (150 + 60) s; foundation 30 s and 45 s
    assert cost_row(page, "p1")[:4] == ["p1", "2", "3", "3.5"]
    assert cost_row(page, "foundation")[:4] == ["foundation", "1", "0.5", "0.8"]
    assert cost_row(page, "total")[:4] == ["total", "3", "3.5", "4.3"]
    for name, md in TABLES.items():
        assert f"#### {name}\n\n{md}\n" in page  # verbatim, under its name
    order = [page.index(f"#### {n}\n") for n in ("base/decoding", "p1/table1", "p1/table2", "p1/table10")]
    assert order == sorted(order) and page.index("### base") < page.index("### p1") < order[1]
    assert "- `results/figures/p1/fig5.png`" in page


def test_cli_writes_a_dated_page_named_by_scale(results, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # not a git checkout
    out = rp.main(["--results", str(results), "--command", "snakemake -c2 all", "--out", str(tmp_path / "pages"),
                   "--note", "elapsed 61 s"])  # fmt: skip
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}-tiny\.md", out.name) and out.parent == tmp_path / "pages"
    page = out.read_text()
    assert "| commit | unknown (not a git checkout) |" in page and "| command | `snakemake -c2 all` |" in page
    assert "| note | elapsed 61 s |" in page
    assert "logical CPUs" in page


def test_scales_and_an_untimed_run(tmp_path):
    root = tmp_path / "results"
    (root / "decode/p1").mkdir(parents=True)
    (root / "decode/p1/a.json").write_text(json.dumps({"scale": "tiny"}))
    (root / "decode/p1/b.json").write_text(json.dumps({"scale": "embedded"}))
    assert rp.run_scale(root) == "embedded+tiny" and rp.run_scale(tmp_path / "none") == "unknown"
    page = rp.results_page(root, "x", date="d", commit="c", where="w", scale=rp.run_scale(root))
    assert "| scale | embedded+tiny |" in page
    assert "No benchmark files" in page and "The run built no table." in page and "The run drew no figure." in page


def test_how_the_run_held_its_cores(results, tmp_path):
    """From the hand-written log of test_core_usage: 40 s on 2 cores, 50 of 80 core-seconds held; the free
    stretches by free core-seconds: b's 20 s, then a's 10 s."""
    log = tmp_path / "run.snakemake.log"
    log.write_text(LOG)
    page = rp.results_page(results, "x", date="d", commit="c", where="w", scale="tiny", log=log)
    assert "0.7 min on 2 cores, 1.3 core-minutes, of which the jobs' declared threads held 0.8 and 0.5 were free" in page
    rows = [line for line in page.splitlines() if line.startswith("|") and ("b[run=main]" in line or "| a " in line)]
    assert [[c.strip() for c in r.strip("|").split("|")] for r in rows] == [
        ["0.2", "0.3", "1", "b[run=main]"],
        ["0", "0.2", "1", "a"],
    ]
    assert page.index("How the run held its cores") < page.index("## Tables")
    assert "How the run held its cores" not in rp.results_page(results, "x", date="d", commit="c", where="w", scale="t")


def test_a_cpu_is_named_by_its_widest_vector_extension():
    """The extension decides the kernels (and bf16 training), so two CPUs of one model name tell apart by it."""
    assert rp.cpu_isa({"fpu", "sse2", "avx2"}) == "AVX2"
    assert rp.cpu_isa({"avx2", "avx512f", "avx512bw"}) == "AVX-512"
    assert rp.cpu_isa({"avx2", "avx512f", "avx512_bf16"}) == "AVX-512 BF16"
    assert rp.cpu_isa({"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}) == "AMX"
    assert rp.cpu_isa({"neon", "asimd"}) is None
