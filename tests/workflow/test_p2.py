"""Paper 2 in the tiny-scale `all` run (the session's shared run, tests/workflow/conftest.py): Table 1 and Figures
3-4 with their contents (CAR / AR per head, the paired differences, lossless speed rows), the leaderboard's
mtp-spec rows, the DAG of every paper-2 target at tiny, embedded and paper scale, and bad configs stopping before
any job."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from mtp_core.papers.p2.plan import P2Plan
from mtp_core.validation import load_config

from ..conftest import REPO, job_counts
from .conftest import assert_bad_tiny_config_stops


def test_p2_part_of_all(tiny_run):
    res = tiny_run / "results"
    for name in ("fig3", "fig4"):
        assert (res / f"figures/p2/{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = pd.read_csv(res / "tables/p2/table1.csv")
    # blocks K = 1 and K = 4, each MTP then MTP-D, then their paired differences per head (AR and CAR)
    runs = list(dict.fromkeys(data["run"]))
    assert runs == ["mtp_k1", "mtpd_k1", "mtpd_k1-mtp_k1", "mtp_k4", "mtpd_k4", "mtpd_k4-mtp_k4"]
    k4 = data[data["run"] == "mtpd_k4"]
    assert k4["H"].tolist() == [1, 2, 3, 4]
    for ps in ("math", "specbench"):
        car, ar = k4[f"{ps} CAR"].to_numpy(), k4[f"{ps} AR"].to_numpy()
        assert ((ar >= 0) & (ar <= 1)).all() and (car[1:] <= car[:-1] + 1e-12).all()  # CAR decays with H
    md = (res / "tables/p2/table1.md").read_text()
    assert "paired 95% CI" in md and " / " in md and "| Seeds" in md
    # the K = 1 arms trained twice (seeds: 2): their rows and difference rows carry the spread over seeds
    assert data.loc[data["run"].isin(["mtp_k1", "mtpd_k1", "mtpd_k1-mtp_k1"]), "seeds"].tolist() == [2] * 4
    assert data.loc[data["run"] == "mtpd_k4", "seeds"].isna().all()
    acc = json.loads((res / "decode/p2/mtpd_k4/prompts-math/h8.json").read_text())
    heads = acc["decode_stats"]["heads"]
    assert acc["decode_stats"]["simulated"] and acc["settings"]["loop"] and len(heads["ar"]) == 8
    assert heads["C_cmp"][0] == heads["C_step"] and heads["tau"] == pytest.approx(1 + sum(heads["car"]))


def test_speed_rows_are_lossless_and_relative_to_the_baseline(tiny_run):
    base = tiny_run / "results/decode/p2/speed/fig4"
    rows = {p.stem: json.loads(p.read_text()) for p in base.glob("*.json")}
    cached = {"greedy", "mtp_k1-h1", "mtpd_k1-h1", "mtp_k4-h4", "mtpd_k4-h4"}
    assert set(rows) == cached | {"greedy-nokv", *(f"{r}-nokv" for r in cached - {"greedy"})}  # both protocols
    for name, r in rows.items():
        st, kv = r["decode_stats"], not name.endswith("-nokv")
        assert st["identical_fraction"] == 1.0 and r["settings"]["kv_cache"] == kv
        assert st["speedup_vs_baseline"] > 0 and (st.get("modeled_speedup_vs_greedy", 0) > 0) == kv
        if not name.startswith("greedy"):
            assert r["decoder"]["name"] == "mtp-spec" and st["heads"]["C_step"] > 0
            assert r["decoder"]["params"].get("kv_cache", True) == kv
    assert rows["mtp_k1-h1"]["decode_stats"]["speedup_vs_baseline"] == pytest.approx(1.0)
    assert rows["mtp_k1-h1-nokv"]["decode_stats"]["speedup_vs_baseline"] == pytest.approx(1.0)
    assert rows["greedy-nokv"]["decoder"]["name"] == "greedy-uncached"
    # the same accepted drafts under both protocols
    assert rows["mtpd_k4-h4-nokv"]["decode_stats"]["heads"] == rows["mtpd_k4-h4"]["decode_stats"]["heads"]


def test_leaderboard_has_the_mtp_rows(tiny_run):
    data = pd.read_csv(tiny_run / "results/tables/leaderboard.csv")
    rows = data[data["paper"] == "p2"]
    assert set(rows["label"]) == {"p2-mtp_k1-h1", "p2-mtpd_k4-h4"}


def test_dry_run_of_every_p2_target(dry_run):
    cfg = load_config(REPO / "config/tiny.yaml")
    counts = job_counts(dry_run("config/tiny.yaml", "papers"))
    assert counts["p2_train"] == len(P2Plan(cfg).run_names()) == 15 + 2  # + the K = 1 arms' second seeds
    assert counts["p2_acceptance"] == 17 and counts["p2_table"] == 8 and counts["p2_figure"] == 12
    assert counts["p2_reference"] == 1 + 10  # the base model and every run that trained its trunk
    assert counts["p2_features"] == 2  # frozen trunks share one cache; partial-joint runs another
    assert (
        counts["p2_speed_fig4"] == counts["p2_speed_fig5"] == counts["p2_speed_fig8"] == counts["p2_speed_table8"] == 1
    )


@pytest.mark.parametrize("config", ["config.yaml", "config/paper.yaml"])
def test_embedded_and_paper_dags(dry_run, config):
    counts = job_counts(dry_run(config, "papers"))
    assert counts["p2_table"] == 8 and counts["p2_figure"] == 12 and counts["p2_train"] >= 4


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "method: {seq_len: 32, val_tokens: 2000, loss: {topn: 32}}",
            "method: {seq_len: 32, val_tokens: 2000, loss: {topn: 0}}",
            "papers.p2.method.loss.topn",  # the schema (N >= 1) stops it first
        ),
        (
            "mtp_k4: {title: MTP, method: {num_heads: 4,",
            "mtp_k4: {title: MTP, method: {num_heads: 0,",
            "papers.p2.runs.mtp_k4.method",
        ),
        (
            "mtpd_k4: {title: MTP-D, method: {num_heads: 4, loss: {beta: 0.5}}}",
            "mtpd_k4: {title: MTP-D, method: {num_heads: 4, loss: {beta: -0.5}}}",
            "beta",
        ),
        (
            "model: tiny-qwen3-math\n    dataset: pretrain",
            "model: tiny-llama\n    dataset: pretrain",
            "papers.p2.leaderboard.p2-mtp_k1-h1: its heads are trained from 'tiny-llama'",
        ),
        ("reference_extra_tokens: 9", "reference_extra_tokens: 8", "papers.p2.reference_extra_tokens"),
        (
            "extend: {from: mtpd_k4, new_heads: 4}",
            "extend: {from: mtpd_k9, new_heads: 4}",
            "papers.p2.runs.loopd_4to8.extend.from",
        ),
    ],
)
def test_bad_p2_config_stops_before_any_job(tmp_path, old, new, message):
    assert_bad_tiny_config_stops(tmp_path, old, new, message)
