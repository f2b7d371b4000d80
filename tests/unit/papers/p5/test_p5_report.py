"""Every column of paper 5's Tables 1 and 2 and every series of its figures, on hand-written result files, against
values computed here by hand."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from matplotlib.figure import Figure

from mtp_core.io import atomic_write_jsonl
from mtp_core.papers.p5.figures import _draw, acceptance_series, regimes_series, throughput_series
from mtp_core.papers.p5.regimes import FEATURES
from mtp_core.papers.p5.report import table1, table2


def write_result(path, tps, speedup, modeled, per_forward, identical, samples, nll=None):
    stats = {
        "tokens_per_s": tps,
        "speedup_vs_greedy": speedup,
        "modeled_speedup_vs_greedy": modeled,
        "tokens_per_forward": {"mean": per_forward + 0.5, "pooled": per_forward},  # the table shows the pooled one
        "identical_fraction": identical,
    }
    if nll is not None:  # (mean, stderr, per sample) as the job writes them
        stats["continuation_nll"] = {"mean": nll[0], "stderr": nll[1], "per_sample": nll[2]}
    path.write_text(json.dumps({"n": len(samples), "decode_stats": stats}))
    atomic_write_jsonl(str(path).replace(".json", ".samples.jsonl"), samples)
    return str(path)


def test_table1_columns_by_hand(tmp_path):
    greedy = write_result(tmp_path / "greedy.json", 10.0, 1.0, 1.0, 1.0, 1.0, [{"accepted": [1, 1, 1]}] * 2)
    vanilla = write_result(
        tmp_path / "vanilla.json",
        12.0,
        1.2,
        1.0,
        1.0,
        0.0,
        [{"accepted": [1, 1, 1], "extra": {"drafted": [0, 0, 0]}}] * 2,
        nll=(2.3, 0.3, [2.0, 2.6]),
    )
    entmtp = write_result(
        tmp_path / "entmtp.json",
        15.0,
        1.5,
        1.4,
        2.0,
        1.0,
        [
            {"accepted": [1, 3, 2, 1], "extra": {"drafted": [0, 7, 3, 3]}},  # accepts 2, 1, 0 (bonus excluded)
            {"accepted": [1, 4], "extra": {"drafted": [0, 7]}},  # accept 3
        ],
        nll=(2.75, 0.25, [2.5, 3.0]),
    )
    checks = tmp_path / "check.json"
    checks.write_text(json.dumps({"methods": {"entmtp_tau": {"equal": True}}}))
    typical = tmp_path / "check_typical.json"
    typical.write_text(json.dumps({"methods": {"entmtp_tau": {"equal": None}}}))
    rows = [
        {
            "task": t,
            "task_title": t.upper(),
            "method": m,
            "title": m,
            "path": p,
            "reference": greedy,
            "vanilla": vanilla,
        }
        for t in ("a", "b")
        for m, p in (("vanilla", vanilla), ("entmtp_tau", entmtp))
    ]
    data = table1(rows, {"a": str(checks), "b": str(typical)}).data
    e = data.iloc[1].to_dict()
    assert e["tok/s"] == 15.0 and e["× vanilla"] == pytest.approx(15 / 12) and e["× greedy"] == 1.5
    assert e["modeled × greedy"] == 1.4 and e["tokens/forward"] == 2.0 and e["identical"] == 1.0 and e["n"] == 2
    assert e["τ (bonus excl.)"] == pytest.approx(2.0)  # per prompt: mean(2, 1, 0) = 1 and 3
    assert e["τ stderr"] == pytest.approx(np.std([1, 3], ddof=1) / math.sqrt(2))
    assert e["tokens/step"] == pytest.approx(3.0) and e["tokens/step stderr"] == pytest.approx(1.0)  # 2 and 4
    assert e["drafted nodes/step"] == pytest.approx(5.0) and e["largest-tree share"] == pytest.approx(0.5)
    assert e["simulated = actual"] is True
    # continuation NLL as the job wrote it; against vanilla, paired by prompt: 2.5 - 2.0 and 3.0 - 2.6
    assert (e["continuation NLL"], e["continuation NLL stderr"]) == (2.75, 0.25)
    assert e["Δ NLL vs vanilla"] == pytest.approx(0.45) and e["Δ NLL stderr"] == pytest.approx(0.05)
    v = data.iloc[0].to_dict()
    assert v["× vanilla"] == 1.0 and v["× greedy"] == 1.2 and v["τ (bonus excl.)"] == 0.0 and v["tokens/step"] == 1.0
    assert v["drafted nodes/step"] == 0.0 and v["identical"] == 0.0 and v["simulated = actual"] is None
    assert data.iloc[3]["simulated = actual"] is None  # typical acceptance: the T 0 simulation does not apply
    assert list(data["task"]) == ["A", "A", "B", "B"]


def test_table2_columns_by_hand(tmp_path):
    rows = [
        {"id": "pub", "n_nodes": 63, "depth": 4, "biased": None, "self": 2.0},
        {"id": "x", "n_nodes": 2, "depth": 2, "biased": 1.0, "self": 0.9},
        {"id": "y", "n_nodes": 3, "depth": 3, "biased": 1.3, "self": 1.35},
        {"id": "z", "n_nodes": 5, "depth": 4, "biased": 1.6, "self": 1.5},
        {"id": "u", "n_nodes": 8, "depth": 4, "biased": 2.0, "self": 1.9},
    ]
    self_path = tmp_path / "self.json"
    self_path.write_text(json.dumps({"rows": rows, "max_abs_delta": 0.1, "kendall_tau": 1.0, "n_trees": 4}))
    data = table2({"t": ("unused", str(self_path))}, {"t": "Task"}, [2, 4, 8, 16]).data
    # the largest re-scored tree within each size: 2 -> x, 4 -> y, 8 -> u, 16 -> u again (once)
    assert list(data["n"]) == [2, 3, 8] and list(data["D"]) == [2, 3, 4]
    assert list(data["biased"]) == [1.0, 1.3, 2.0] and list(data["self"]) == [0.9, 1.35, 1.9]
    assert list(data["Δ (self - biased)"]) == pytest.approx([-0.1, 0.05, -0.1])
    assert set(data["max |Δ| (all frontier trees)"]) == {0.1} and set(data["Kendall τ (all)"]) == {1.0}
    assert set(data["frontier trees"]) == {4} and set(data["task"]) == {"Task"}


SEARCH = {
    "per_depth_history": {
        "1": [{"n_nodes": 2, "mean_accept": 0.5}, {"n_nodes": 3, "mean_accept": 0.7}],
        "2": [
            {"n_nodes": 2, "mean_accept": 0.6},
            {"n_nodes": 3, "mean_accept": 0.9},
            {"n_nodes": 4, "mean_accept": 1.0},
        ],
        "3": [],
    }
}
SELF = {
    "rows": [  # per-depth re-scoring: each depth's frontier, in depth order
        {"id": "mc_sim_7b_63", "n_nodes": 63, "depth": 4, "biased": None, "self": 0.8},
        {"id": "a", "n_nodes": 2, "depth": 1, "biased": 0.5, "self": 0.45},
        {"id": "b", "n_nodes": 3, "depth": 1, "biased": 0.7, "self": 0.66},
        {"id": "c", "n_nodes": 2, "depth": 2, "biased": 0.6, "self": 0.62},
        {"id": "d", "n_nodes": 3, "depth": 2, "biased": 0.9, "self": 0.88},
        {"id": "e", "n_nodes": 4, "depth": 2, "biased": 1.0, "self": 0.97},
    ]
}


def xy(series, label):
    return series[label].x, series[label].y


def test_acceptance_series_by_hand():
    s = acceptance_series(SEARCH, SELF)
    assert list(s) == ["D = 1", "D = 2", "Pareto (biased)", "self rollout", "mc_sim_7b_63"]
    assert xy(s, "D = 1") == ([2, 3], [0.5, 0.7]) and xy(s, "D = 2") == ([2, 3, 4], [0.6, 0.9, 1.0])
    assert xy(s, "Pareto (biased)") == ([2, 3, 4], [0.6, 0.9, 1.0])  # over all depths, by nodes
    assert xy(s, "self rollout") == ([2, 2, 3, 3, 4], [0.45, 0.62, 0.66, 0.88, 0.97])
    assert xy(s, "mc_sim_7b_63") == ([63], [0.8]) and s["mc_sim_7b_63"].kind == "star"


THROUGHPUT = {
    "rows": [  # not in node order: the series sort them
        {"id": "mc_sim_7b_63", "n_nodes": 63, "biased": None, "modeled_tokens_per_s": 5.0},
        {"id": "root_only", "n_nodes": 0, "depth": 0, "biased": None, "modeled_tokens_per_s": 10.0},
        {"id": "a", "n_nodes": 3, "depth": 1, "biased": 0.7, "modeled_tokens_per_s": 11.0},
        {"id": "b", "n_nodes": 2, "depth": 1, "biased": 0.5, "modeled_tokens_per_s": 12.0},
        {"id": "d", "n_nodes": 4, "depth": 2, "biased": 1.0, "modeled_tokens_per_s": 14.0},
        {"id": "c", "n_nodes": 2, "depth": 2, "biased": 0.6, "modeled_tokens_per_s": 13.0},
    ],
    "hull": ["root_only", "c", "d"],
    "best": "d",
    "greedy": {"modeled_tokens_per_s": 10.0},
}


def test_throughput_series_by_hand():
    s = throughput_series(THROUGHPUT)
    assert list(s) == ["D = 1", "D = 2", "hull", "EntMTP* (4 nodes)", "mc_sim_7b_63", "greedy"]
    assert xy(s, "D = 1") == ([2, 3], [12.0, 11.0]) and xy(s, "D = 2") == ([2, 4], [13.0, 14.0])
    assert xy(s, "hull") == ([0, 2, 4], [10.0, 13.0, 14.0]) and xy(s, "EntMTP* (4 nodes)") == ([4], [14.0])
    assert xy(s, "mc_sim_7b_63") == ([63], [5.0]) and xy(s, "greedy") == ([], [10.0])
    ax = Figure().subplots()
    _draw(ax, s, "t", "y", "--")
    lines = {ln.get_label(): (list(ln.get_xdata()), list(ln.get_ydata())) for ln in ax.lines}
    assert lines["hull"] == ([0, 2, 4], [10.0, 13.0, 14.0]) and lines["D = 2"] == ([2, 4], [13.0, 14.0])
    assert lines["greedy"][1] == [10.0, 10.0] and ax.get_xscale() == "symlog"  # the root-only tree at 0


def test_regimes_series_by_hand():
    pearson = dict(zip(FEATURES, [0.5, 0.4, 0.3, 0.2, -0.1, -0.2, None]))
    tasks, grid, auc = regimes_series({"t": {"pearson": pearson, "classifier": {"auroc": 0.7}}, "u": None})
    assert tasks == ["t", "u"] and auc == [0.7, None]
    assert grid[0, :6].tolist() == [0.5, 0.4, 0.3, 0.2, -0.1, -0.2] and np.isnan(grid[0, 6])
    assert np.isnan(grid[1]).all() and grid.shape == (2, len(FEATURES))


def test_continuation_nll_by_hand(tmp_path):
    """The base model's NLL of each emitted continuation after its prompt (§5.1's continuation perplexity): each
    token's -log softmax written out position by position from a full forward, averaged per sample; the job's
    record holds every sample's value, their mean and its standard error, and refuses samples of other prompts."""
    import torch

    from mtp_core.models.load import tiny_model
    from mtp_core.papers.p5.quality import add_continuation_nll, continuation_nll
    from tests.conftest import tiny_spec

    torch.manual_seed(0)
    model = tiny_model(tiny_spec("llama", num_layers=2)).eval()
    prompts, conts = [[5, 9, 14], [7, 3]], [[21, 4, 4, 30], [11]]
    want = []
    for p, c in zip(prompts, conts):
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([p + c])).logits[0].double()
        nll = [-torch.log_softmax(logits[len(p) + i - 1], -1)[t].item() for i, t in enumerate(c)]
        want.append(sum(nll) / len(nll))
        assert continuation_nll(model, p, c) == pytest.approx(want[-1], rel=1e-5)
    assert continuation_nll(model, prompts[0], []) is None
    path = tmp_path / "m.json"
    write_result(
        path, 1.0, 1.0, 1.0, 1.0, 1.0, [{"prompt_tokens": len(p), "tokens": c} for p, c in zip(prompts, conts)]
    )
    add_continuation_nll(model, prompts, [str(path)])
    got = json.loads(path.read_text())["decode_stats"]["continuation_nll"]
    assert got["per_sample"] == pytest.approx(want, rel=1e-5) and got["mean"] == pytest.approx(sum(want) / 2)
    assert got["stderr"] == pytest.approx(abs(want[0] - want[1]) / 2, rel=1e-5)  # std of two / sqrt 2
    with pytest.raises(ValueError, match="not one per prompt"):
        add_continuation_nll(model, prompts[::-1], [str(path)])
