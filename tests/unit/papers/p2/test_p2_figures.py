"""Paper 2's figures: every series against numbers computed by hand from result files written by hand
(`p2_results`): CAR / AR per head index under loops (Figs 3, 11-14), speedups per benchmark and protocol (Fig. 4),
CAR over all benchmarks and speedup per strategy (Fig. 5), Top-N mass (Fig. 6), training curves (Figs 7, 10),
final validation losses against the reference run (Fig. 9); and every figure renders."""

from __future__ import annotations

from pathlib import Path

import pytest

from mtp_core.papers.p2 import figures
from tests.unit.papers.p2.p2_results import counters as c
from tests.unit.papers.p2.p2_results import fake_run, write_json
from tests.unit.papers.p2.test_p2_tables import speed_params

SETS = ["math", "code"]
# a K = 2 run decoded with D = 4 (the loop 2 -> 4): math A [2, 1, 1, 0] C [3, 2, 1, 1] S 3 (one prompt),
# code A [1, 1, 0, 0] C [2, 1, 1, 0] S 2 (two prompts): pooled A [3, 2, 1, 0] C [5, 3, 2, 1] S 5
LOOP = {
    "math": {4: [c([2, 1, 1, 0], [3, 2, 1, 1], 3)], 2: [c([2, 1], [3, 2], 3)]},
    "code": {4: [c([1, 1, 0, 0], [1, 1, 1, 0], 1), c([0, 0, 0, 0], [1, 0, 0, 0], 1)], 2: [c([1, 1], [2, 1], 2)]},
}


def loop_params(tmp_path: Path, name: str, spec: dict) -> dict:
    runs = {"m": fake_run(tmp_path, "m", "MTP", 2, LOOP)}
    return {"name": name, "spec": spec, "prompt_sets": SETS, "runs": runs}


def test_loop_figures_plot_car_and_ar_per_head_index(tmp_path):
    fig3 = figures.loop_series(loop_params(tmp_path, "fig3", {"runs": ["m"], "depth": 4, "prompt_set": "code"}))
    assert list(fig3) == [("car", "code"), ("ar", "code")]
    assert list(fig3["car", "code"]) == ["MTP 2→4"]
    assert fig3["car", "code"]["MTP 2→4"].tolist() == pytest.approx([0.5, 0.5, 0.0, 0.0])  # A / C_step (2)
    assert fig3["ar", "code"]["MTP 2→4"].tolist() == pytest.approx([0.5, 1.0, 0.0, 0.0])  # A / C_cmp
    fig12 = figures.loop_series(loop_params(tmp_path, "fig12", {"runs": ["m"], "depth": 4}))
    assert list(fig12) == [("ar", "math"), ("ar", "code")]
    assert fig12["ar", "math"]["MTP 2→4"].tolist() == pytest.approx([2 / 3, 1 / 2, 1.0, 0.0])
    fig13 = figures.loop_series(loop_params(tmp_path, "fig13", {"runs": ["m"]}))  # no depth: the run's K
    assert fig13["car", "math"]["MTP K=2"].tolist() == pytest.approx([2 / 3, 1 / 3])


def strategies_params(tmp_path: Path) -> dict:
    params = speed_params(tmp_path, "fig5")
    params["runs"] = {
        "a": fake_run(tmp_path, "a", "MTP", 1, {ps: {1: [c([1], [2], 2)]} for ps in SETS}),
        "b": fake_run(tmp_path, "b", "MTP-D", 2, LOOP),
    }
    for r in params["speed"]["rows"]:
        r["depth"] = 1 if r["run"] == "a" else 4
    return params


def test_fig4_speedups_per_benchmark_and_protocol(tmp_path):
    series = figures.speed_series(speed_params(tmp_path, "fig4"))
    assert list(series) == ["KV cache", "no KV cache (App. D)"]
    cached, uncached = series["KV cache"], series["no KV cache (App. D)"]
    assert cached["sets"] == ["math", "code", "all"]
    assert cached["bars"] == {"MTP K=1": [1.0, 1.0, 1.0], "MTP-D K=4": [1.5, 0.9, 1.2]}
    assert cached["modeled"] == {"MTP K=1": 1.0, "MTP-D K=4": 1.25}
    assert uncached["bars"]["MTP-D K=4"] == [2.0, 1.5, 1.75] and uncached["modeled"]["MTP-D K=4"] is None


def test_fig5_car_over_all_benchmarks_and_speedup_per_strategy(tmp_path):
    car, speed = figures.strategies_series(strategies_params(tmp_path))
    assert car["MTP-D K=4"].tolist() == pytest.approx([3 / 5, 2 / 5, 1 / 5, 0.0])  # pooled over every prompt
    assert car["MTP K=1"].tolist() == pytest.approx([0.5])
    assert speed == {
        "KV cache": {"MTP K=1": 1.0, "MTP-D K=4": 1.2},
        "no KV cache (App. D)": {"MTP K=1": 1.0, "MTP-D K=4": 1.75},
    }


def test_fig6_7_9_series(tmp_path):
    (tmp_path / "topn.csv").write_text("topn,mass,stderr\n1,0.5,0.01\n10,0.9,0.01\n320,1.0,0.0\n")
    n, mass = figures.topn_series({"topn": str(tmp_path / "topn.csv")})
    assert n.tolist() == [1, 10, 320] and mass.tolist() == [0.5, 0.9, 1.0]
    (tmp_path / "r").mkdir()
    (tmp_path / "r/curves.csv").write_text("step,loss_main,ce@1,ce@2,ce@3\n1,2.0,3.0,3.5,\n2,1.9,2.8,,\n")
    runs = {"r": {"title": "MTP-D", "heads": 3, "record": str(tmp_path / "r/train.json")}}
    steps, curves = figures.curves_series({"spec": {"run": "r"}, "runs": runs})
    assert steps == [1.0, 2.0] and list(curves) == ["main head", "MTP head 1", "MTP head 2"]
    assert curves == {"main head": [2.0, 1.9], "MTP head 1": [3.0, 2.8], "MTP head 2": [3.5, None]}
    vals = {"r0": (1.5, 2.5), "r1": (1.4, 2.6), "r2": (1.6, 2.4)}
    runs = {r: {"validation": write_json(tmp_path / f"{r}.json", {"metrics": {"loss_main": a, "ce@1": b}})}
            for r, (a, b) in vals.items()}  # fmt: skip
    series = figures.final_losses_series({"spec": {"runs": list(vals)}, "runs": runs})
    assert series["loss_main"] == {"r0": (1.5, "reference"), "r1": (1.4, "lower"), "r2": (1.6, "higher")}
    assert series["ce@1"] == {"r0": (2.5, "reference"), "r1": (2.6, "higher"), "r2": (2.4, "lower")}


def test_every_figure_renders(tmp_path):
    (tmp_path / "topn.csv").write_text("topn,mass,stderr\n1,0.5,0.01\n1000,0.9,0.01\n")
    (tmp_path / "b").mkdir(exist_ok=True)
    (tmp_path / "b/curves.csv").write_text("step,loss_main,ce@1,ce@2\n1,2.0,3.0,3.5\n2,1.9,2.8,3.1\n")
    params = strategies_params(tmp_path)
    for r in ("a", "b"):
        params["runs"][r]["record"] = str(tmp_path / "b/train.json")
        params["runs"][r]["validation"] = write_json(
            tmp_path / f"val-{r}.json", {"metrics": {"loss_main": 1.0, "ce@1": 2.0}}
        )
    specs = {"fig3": {"runs": ["b"], "depth": 4, "prompt_set": "code"}, "fig11": {"runs": ["b"], "depth": 4},
             "fig4": {}, "fig5": {}, "fig6": {}, "fig7": {"run": "b"}, "fig9": {"runs": ["a", "b"]}}  # fmt: skip
    for name, spec in specs.items():
        p = {**params, "name": name, "spec": spec, "topn": str(tmp_path / "topn.csv"), "base": {"model": "m"}}
        figures.make_figure(p, str(tmp_path / f"{name}.png"), str(tmp_path / f"{name}.pdf"))
        assert (tmp_path / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
