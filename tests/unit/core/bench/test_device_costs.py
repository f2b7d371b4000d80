"""The GPU decode costs committed as data (`bench/device_costs`): every file says where and how it was measured and
holds a cost table the leaderboard can price with; docs/measurements.md shows exactly what the files hold."""

from __future__ import annotations

import json

import pytest

from mtp_core.bench.device_costs import DEVICE_COSTS_DIR, device_tables, drafters_markdown, markdown
from tests.conftest import REPO

FILES = sorted(DEVICE_COSTS_DIR.glob("*.json"))


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_a_committed_file_says_where_and_how_and_holds_a_cost_table(path):
    d = json.loads(path.read_text())
    assert path.stem == f"{d['shape']}_{d['device'].lower().removeprefix('nvidia ').replace(' ', '-')}"
    assert d["dtype"] == "bfloat16" and d["date"] and len(d["commit"]) == 40 and d["command"]
    assert {"torch", "transformers"} <= set(d["versions"])
    eager = d["verify_eager"]
    assert eager["table"]["1"] == 1.0 and set(eager["head"]) == set(eager["table"])
    assert all(0 < eager["head"][r] < c for r, c in eager["table"].items())
    assert {"greedy", "hf-greedy", "greedy-compiled"} == set(d["speed"]["decoders"])


def test_a_table_prices_a_chunk_at_its_measured_cost():
    for t in device_tables():
        raw = json.loads((DEVICE_COSTS_DIR / f"{t.key}.json").read_text())["verify_eager"]
        cost = t.cost_model()
        assert cost(4) == pytest.approx(raw["table"]["4"]) and cost.head_cost(8) == pytest.approx(raw["head"]["8"])
        assert cost(3) == pytest.approx((raw["table"]["2"] + raw["table"]["4"]) / 2)  # linear between entries


def test_the_measurements_page_shows_what_the_files_hold():
    page = (REPO / "docs/measurements.md").read_text()
    cpu = sorted((REPO / "benchmarks/results").glob("smollm2-135m_cpu*.json"))
    assert markdown() in page and len(cpu) == 2 and markdown(cpu) in page
    assert any("drafters" in json.loads(p.read_text()) for p in cpu) and drafters_markdown(cpu) in page


def test_the_drafters_table_by_hand(tmp_path):
    """Each drafter's tok/s over compiled greedy's from the same file; a lossy row says so; a file without a
    `drafters` section adds no row."""

    def row(tps: float, tpf: float, compile_s: float, same: bool | None) -> dict:
        return {"tokens_per_s": tps, "tokens_per_forward": {"mean": tpf, "std": 0.0}, "forward_passes": 10,
                "compile_s": compile_s, "identical_to_compiled_greedy": same}  # fmt: skip

    head = {"shape": "smollm2-135m", "device": "cpu", "dtype": "float32", "speed": {"batch_size": 1}}
    with_drafters = tmp_path / "a.json"
    with_drafters.write_text(json.dumps({**head, "drafters": {
        "hydra-compiled": row(10.0, 4.456, 85.6, False), "greedy-compiled": row(40.0, 1.0, 70.4, True),
        "dmtd-tau3": row(50.0, 1.0, 0.0, None)}}))  # fmt: skip
    without = tmp_path / "b.json"
    without.write_text(json.dumps(head))
    on_onednn = tmp_path / "c.json"  # a file that records the CPU linears' kernel names it
    kernel = {"cpu_linear": "onednn"}
    on_onednn.write_text(json.dumps({**head, **kernel, "drafters": {
        "dmtd-tau3": row(5.0, 1.0, 0.0, None), "greedy-compiled": row(4.0, 1.0, 1.0, True)}}))  # fmt: skip
    assert drafters_markdown([with_drafters, without, on_onednn]).splitlines()[2:] == [
        "| SmolLM2-135M | cpu, float32 | 1 | hydra-compiled | 10.0 | 0.25 | 4.46 | 86 | no |",
        "| SmolLM2-135M | cpu, float32 | 1 | greedy-compiled | 40.0 | 1.00 | 1.00 | 70 | yes |",
        "| SmolLM2-135M | cpu, float32 | 1 | dmtd-tau3 | 50.0 | 1.25 | 1.00 | 0 | - (lossy) |",
        "| SmolLM2-135M | cpu, float32, onednn linears | 1 | dmtd-tau3 | 5.0 | 1.25 | 1.00 | 0 | - (lossy) |",
        "| SmolLM2-135M | cpu, float32, onednn linears | 1 | greedy-compiled | 4.0 | 1.00 | 1.00 | 1 | yes |",
    ]
