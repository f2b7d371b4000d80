"""The leaderboard in the tiny-scale `all` run (the session's shared run, tests/workflow/conftest.py): its table and
figure, every row on every prompt set, lossless rows identical to greedy, accuracy on the math set only, the
students' rows on paper 1's trained checkpoint; the embedded and paper configs plan it."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from mtp_core.bench.leaderboard import plan as lb
from mtp_core.validation import load_config

from ..conftest import REPO, job_counts

ROWS = [
    "greedy",
    "greedy-compiled",
    "pld",
    "lookahead",
    "stand",
    "p1-main-static-k2",
    "p1-main-conf-adapt-tau0.9",
    "p2-mtp_k1-h1",
    "p2-mtpd_k4-h4",
    "p3-probing_vocab_mean-bc10",
    "p3-probing_vocab_mean-bc10-guarded",
    "p4-main-dmtd-tau3",
    "p4-main-dmtd-selected",
    "p5-medusa_default",
    "p5-hydra_default",
    "p5-entmtp_static",
    "p5-entmtp_tau",
]


def test_leaderboard_table_and_figure(tiny_run):
    res = tiny_run / "results"
    table = pd.read_csv(res / "tables/leaderboard.csv")
    assert list(table["label"]) == ROWS * 2 and list(dict.fromkeys(table["prompt set"])) == ["math", "specbench"]
    lossless = table[table["lossless"] == "yes"]
    lossy = {"p1-main-static-k2", "p1-main-conf-adapt-tau0.9", "p4-main-dmtd-tau3", "p4-main-dmtd-selected"}
    assert set(lossless["label"]) == set(ROWS) - lossy  # DMTD `add` is lossy at every τ
    # lossless rows on the eager backend emit eager greedy's tokens; compiled greedy is checked against itself (the
    # bench's compiled reference), and its fraction is the measured agreement of compiled and eager kernels
    eager = lossless[lossless["label"] != "greedy-compiled"]
    assert (eager["identical to greedy"] == 1.0).all()
    assert (table["tok/s"] > 0).all() and (table["× greedy (modeled)"] > 0).all()
    greedy = table[table["label"] == "greedy"]
    assert (greedy["× greedy"] == 1.0).all() and (greedy["× greedy (modeled)"] == 1.0).all()
    compiled = table[table["label"] == "greedy-compiled"]
    assert (compiled["× compiled greedy"] == 1.0).all() and compiled["identical to greedy"].between(0, 1).all()
    eager_rows = table[table["label"] != "greedy-compiled"]
    assert (compiled["compile s"] > 0).all() and (eager_rows["compile s"] == 0).all()  # compiling, reported apart
    records = sorted(res.glob("decode/leaderboard/*/prompts-*/*.json"))
    assert len(records) == 2 * len(ROWS)
    for record in records:
        stats = json.loads(record.read_text())["decode_stats"]
        own = "greedy-compiled" if record.stem == "greedy-compiled" else "greedy"
        assert stats["lossless_reference"] == own and stats["identical_to_greedy"] is not False, record
        # compiling is reported apart: never in a record's decoding wall
        assert (stats["compile_s"] > stats["wall_s"]) if own == "greedy-compiled" else stats["compile_s"] == 0, record
    gpu = [c for c in table.columns if c.startswith("× greedy (modeled, H200")]
    assert len(gpu) == 2 and (greedy[gpu] == 1.0).all().all() and (table[gpu] > 0).all().all()
    assert table.loc[table["prompt set"] == "math", "accuracy (%)"].notna().all()
    assert table.loc[table["prompt set"] == "specbench", "accuracy (%)"].isna().all()
    assert re.search(r"\|\s*P1 main, Static k=2\s*\|", (res / "tables/leaderboard.md").read_text())
    assert (res / "figures/leaderboard.png").read_bytes()[:4] == b"\x89PNG"
    assert "Leaderboard" in (res / "report.html").read_text(errors="replace")


def test_dmtd_rows_run_at_the_trained_and_the_chosen_tau(tiny_run):
    res = tiny_run / "results/decode/leaderboard/tiny-qwen3-math/prompts-math"
    trained = json.loads((res / "p4-main-dmtd-tau3.json").read_text())
    assert trained["paper"] == "p4" and trained["decoder"]["params"]["tau"] == 3
    chosen = json.loads((tiny_run / "results/analysis/p4/main/selected_tau.json").read_text())
    selected = json.loads((res / "p4-main-dmtd-selected.json").read_text())
    assert selected["decoder"]["params"]["tau"] == chosen["params"]["tau"]
    assert selected["decoder"]["lossless"] is False  # `add` is not the vanilla function even at τ = 1


def test_student_rows_run_on_the_trained_checkpoint(tiny_run):
    r = json.loads(
        (tiny_run / "results/decode/leaderboard/tiny-qwen3-math/prompts-math/p1-main-static-k2.json").read_text()
    )
    assert r["paper"] == "p1" and r["decoder"]["name"] == "static-k" and r["decoder"]["params"]["k"] == 2
    assert r["decode_stats"]["tokens_per_forward"]["mean"] == pytest.approx(2.0, abs=0.2)
    assert r["settings"]["step_cost"] and r["metrics"]["accuracy"]["value"] is not None


@pytest.mark.parametrize("config", ["config.yaml", "config/paper.yaml"])
def test_every_scale_plans_a_leaderboard(config, dry_run):
    cfg = load_config(REPO / config)
    labels = [e.label for e in lb.entries(cfg)]
    assert labels[:5] == ["greedy", "greedy-compiled", "pld", "lookahead", "stand"]
    assert any(lab.startswith("p1-") for lab in labels) and any(lab.endswith("-guarded") for lab in labels)
    assert "leaderboard_decode" in job_counts(dry_run(config, "all"))
