"""Paper 2's tables against numbers computed by hand from result files written by hand (`p2_results`): Tables 1 and
7 (CAR / AR per head and benchmark from pooled counters, the mean pooled over every prompt, the paired differences
and their sign, the bootstrap's pairing, the spread over seeds, the column order), Tables 2, 5 and 6 (main-head
accuracy pooled by prompts, KL and identity with the base model matched by prompt id, validation CE, head-1 AR),
Table 3 (the trunk's configuration), Table 4 (the training as configured and run) and Table 8 (speedups per
protocol)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mtp_core.papers.p2.counters import HeadCounters, bootstrap_diff
from mtp_core.papers.p2.report import make_table
from tests.unit.papers.p2.p2_results import counters as c
from tests.unit.papers.p2.p2_results import fake_run, write_json

SETS = ["math", "code"]


def md_rows(path) -> tuple[list[str], list[dict[str, str]]]:
    """(header, rows) of a markdown table as written."""
    lines = Path(path).read_text().splitlines()
    cells = [[x.strip() for x in line.strip().strip("|").split("|")] for line in lines]
    return cells[0], [dict(zip(cells[0], row)) for row in cells[2:]]


def table(params: dict, tmp_path: Path) -> tuple[pd.DataFrame, list[str], list[dict[str, str]]]:
    csv, md = tmp_path / f"{params['name']}.csv", tmp_path / f"{params['name']}.md"
    make_table(params, str(csv), str(md))
    return (pd.read_csv(csv), *md_rows(md))


# ---------------------------------------------------------------------------------------------- Tables 1 and 7
# Per prompt (A, C_cmp, C_step). K = 1: m1 pools math 4/6, code 0/3, all 4/9; d1 math 6/6, code 2/3, all 8/9.
# K = 2: m2 math A [2, 1] C [5, 2] S 5, code A [2, 1] C [2, 2] S 2, all A [4, 2] C [7, 4] S 7;
#        d2 math A [3, 2] C [3, 3] S 3, code A [2, 2] C [3, 2] S 3, all A [5, 4] C [6, 5] S 6.
K1 = {
    "m1": {"math": [c([3], [4], 4), c([1], [2], 2)], "code": [c([0], [3], 3)]},
    "d1": {"math": [c([4], [4], 4), c([2], [2], 2)], "code": [c([2], [3], 3)]},
    "m1-seed1": {"math": [c([2], [4], 4), c([2], [2], 2)], "code": [c([1], [3], 3)]},  # all 5/9
    "d1-seed1": {"math": [c([3], [4], 4), c([2], [2], 2)], "code": [c([1], [3], 3)]},  # all 6/9
}
K2 = {
    "m2": {"math": [c([2, 1], [3, 2], 3), c([0, 0], [2, 0], 2)], "code": [c([2, 1], [2, 2], 2)]},
    "d2": {"math": [c([2, 2], [2, 2], 2), c([1, 0], [1, 1], 1)], "code": [c([2, 2], [3, 2], 3)]},
}


def car_ar_params(tmp_path: Path, seeds: bool = False, name: str = "table1") -> dict:
    runs = {}
    for run, per_set in {**K1, **K2}.items():
        k = 2 if run in K2 else 1
        title = "MTP-D" if run.startswith("d") else "MTP"
        runs[run] = fake_run(tmp_path, run, title, k, {ps: {k: cs} for ps, cs in per_set.items()})
    if seeds:
        runs["m1"]["replicates"], runs["d1"]["replicates"] = ["m1-seed1"], ["d1-seed1"]
    spec = {"blocks": [{"runs": ["m1", "d1"]}, {"runs": ["m2", "d2"]}]} if name == "table1" else {"runs": ["m2", "d2"]}
    return {"name": name, "spec": spec, "prompt_sets": SETS, "runs": runs}


def test_table1_cells_by_hand(tmp_path):
    data, header, shown = table(car_ar_params(tmp_path), tmp_path)
    assert header == ["K", "Method", "H", "math", "code", "Mean"]
    assert data["run"].tolist() == ["m1", "d1", "d1-m1", "d1-m1", "m2", "m2", "d2", "d2", *["d2-m2"] * 4]
    by = {(r.run, r.H, "CAR" if "CAR," in str(r.method) else "AR"): r for r in data.itertuples()}
    m1, d1, m2, d2 = (data[data["run"] == r].reset_index() for r in ("m1", "d1", "m2", "d2"))
    # K = 1: AR pooled per set; the mean pools every prompt (4/9), not the mean of the sets' rates (1/3)
    assert [m1.loc[0, f"{ps} AR"] for ps in SETS] == pytest.approx([4 / 6, 0.0])
    assert (m1.loc[0, "mean AR"], d1.loc[0, "mean AR"]) == pytest.approx((4 / 9, 8 / 9))
    assert m1.loc[0, "mean CAR"] == pytest.approx(4 / 9)  # CAR = AR at K = 1
    # K = 2, per head: CAR_j = A_j / C_step, AR_j = A_j / C_j^cmp
    assert m2["math CAR"].tolist() == pytest.approx([0.4, 0.2]) and m2["math AR"].tolist() == pytest.approx([0.4, 0.5])
    assert m2["code CAR"].tolist() == pytest.approx([1.0, 0.5]) and m2["code AR"].tolist() == pytest.approx([1.0, 0.5])
    assert m2["mean CAR"].tolist() == pytest.approx([4 / 7, 2 / 7]) and m2["mean AR"].tolist() == pytest.approx(
        [4 / 7, 0.5]
    )
    assert d2["mean CAR"].tolist() == pytest.approx([5 / 6, 4 / 6]) and d2["mean AR"].tolist() == pytest.approx(
        [5 / 6, 0.8]
    )
    for frame in (m2, d2):  # pooled counters keep CAR_j = prod_{i <= j} AR_i in the mean
        assert frame["mean CAR"].tolist() == pytest.approx(np.cumprod(frame["mean AR"]).tolist())
    # differences: MTP-D minus MTP (the second run minus the first), per set and pooled over all prompts
    ar1, car2 = by["d2-m2", 1, "AR"], by["d2-m2", 2, "CAR"]
    assert (ar1[_col(data, "math AR")], ar1[_col(data, "code AR")]) == pytest.approx((0.6, -1 / 3))
    assert ar1[_col(data, "all AR")] == pytest.approx(5 / 6 - 4 / 7)
    assert (car2[_col(data, "math CAR")], car2[_col(data, "all CAR")]) == pytest.approx((2 / 3 - 0.2, 2 / 3 - 2 / 7))
    assert by["d2-m2", 2, "AR"][_col(data, "all AR")] == pytest.approx(0.8 - 0.5)
    k1 = by["d1-m1", 1, "AR"]
    assert (k1[_col(data, "math AR")], k1[_col(data, "code AR")], k1[_col(data, "all AR")]) == pytest.approx(
        (1 / 3, 2 / 3, 4 / 9)
    )
    # one prompt in code: every resample is that prompt, so the interval is the point, with its sign
    assert (ar1[_col(data, "code AR lo")], ar1[_col(data, "code AR hi")]) == pytest.approx((-1 / 3, -1 / 3))
    # every math prompt of d1 accepts at least as much as m1's: no resample favours MTP
    assert k1[_col(data, "math AR lo")] >= 0 and k1[_col(data, "math AR lo")] <= 1 / 3 <= k1[_col(data, "math AR hi")]
    # the markdown: K = 1 cells show AR, K = 2 cells "CAR / AR"; differences in points with their interval
    assert (shown[0]["Method"], shown[0]["math"], shown[0]["code"], shown[0]["Mean"]) == (
        "MTP",
        "66.67",
        "0.00",
        "44.44",
    )
    k2 = [r for r in shown if r["K"] == "2"]
    assert (k2[1]["math"], k2[1]["code"], k2[1]["Mean"]) == ("20.00 / 50.00", "50.00 / 50.00", "28.57 / 50.00")
    diff = next(r for r in shown if r["Method"].startswith("MTP-D − MTP (AR"))
    assert diff["K"] == "" and diff["code"] == "+66.67 [+66.67, +66.67]" and diff["Mean"].startswith("+44.44 [")


def _col(data: pd.DataFrame, name: str) -> int:
    return list(data.columns).index(name) + 1  # itertuples puts the index first


def test_table7_has_table1s_columns(tmp_path):
    data, header, _ = table(car_ar_params(tmp_path, name="table7"), tmp_path)
    assert header == ["K", "Method", "H", "math", "code", "Mean"]
    assert data["run"].tolist() == ["m2", "m2", "d2", "d2", *["d2-m2"] * 4]


def test_table1_spread_over_seeds(tmp_path):
    """Seed i of MTP-D minus seed i of MTP, pooled over every prompt: seed 0 +4/9, seed 1 6/9 - 5/9; the runs' mean
    AR over seeds with its sample sd."""
    data, header, shown = table(car_ar_params(tmp_path, seeds=True), tmp_path)
    assert header == ["K", "Method", "H", "math", "code", "Mean", "Seeds"]
    m1 = data[data["run"] == "m1"].iloc[0]
    assert (m1["seeds"], m1["seeds AR mean"], m1["seeds AR sd"]) == pytest.approx((2, 0.5, (1 / 9) / np.sqrt(2)))
    assert (m1["seeds AR min"], m1["seeds AR max"]) == pytest.approx((4 / 9, 5 / 9))
    diff = data[(data["run"] == "d1-m1") & data["method"].str.contains(r"\(AR")].iloc[0]
    assert [float(x) for x in diff["all AR seeds"].split(";")] == pytest.approx([4 / 9, 1 / 9])
    assert diff["all AR seeds mean"] == pytest.approx(5 / 18)
    cells = [r["Seeds"] for r in shown]
    assert cells[:3] == ["50.00 ± 7.86 (2)", "77.78 ± 15.71 (2)", "+44.44, +11.11 (mean +27.78)"]
    assert all(x == "" for x in cells[4:])  # K = 2 runs trained once


def test_bootstrap_is_paired_and_signed():
    """`bootstrap_diff(a, b)` is b - a, resampling the same prompts on both sides: brute force with the same draws."""
    rng = np.random.default_rng(5)
    a, b = [], []
    for _ in range(7):
        steps = int(rng.integers(2, 9))
        ca, cb = sorted(rng.integers(0, steps + 1, 2))
        a.append(HeadCounters(np.array([ca, 0]), np.array([steps, ca]), steps))
        b.append(HeadCounters(np.array([cb, 1]), np.array([steps, cb]), steps))
    got = bootstrap_diff(a, b, "ar", n_boot=300, seed=3)
    idx = np.random.default_rng(3).integers(0, 7, size=(300, 7))
    diffs = []
    for draw in idx:
        rate = [sum(x[i].accepted[0] for i in draw) / sum(x[i].compared[0] for i in draw) for x in (a, b)]
        diffs.append(rate[1] - rate[0])
    point = sum(x.accepted[0] for x in b) / sum(x.compared[0] for x in b)
    point -= sum(x.accepted[0] for x in a) / sum(x.compared[0] for x in a)
    assert got["diff"][0] == pytest.approx(point) and point > 0
    assert (got["lo"][0], got["hi"][0]) == pytest.approx(tuple(np.percentile(diffs, [2.5, 97.5])))
    car = bootstrap_diff(a, b, "car", n_boot=300, seed=3)  # CAR: over verification steps
    steps_total = sum(x.steps for x in a)
    assert car["diff"][1] == pytest.approx(7 / steps_total)


# ---------------------------------------------------------------------------------------- Tables 2, 5 and 6


def main_head_params(tmp_path: Path, name: str) -> dict:
    """Base model `base`; run `ta` decodes with it (frozen trunk), `tb` with its own trained trunk. Accuracy: base
    math 0.75 of 4, gsm 0.5 of 2 (pooled 4/6); tb math 0.5 of 4, gsm 0.5 of 2 (pooled 3/6). tb's greedy outputs:
    math a, b, d as the base's, c not; gsm e as the base's, f not (4/6), written in another order than the base's."""
    sets = ["math", "gsm"]

    def ref(main, ps, acc, n, samples):
        return write_json(tmp_path / main / f"{ps}.json", {"n": n, "metrics": {"accuracy": {"value": acc}}}, samples)

    base_tok = {"a": [1, 2], "b": [3], "c": [4, 5], "d": [6], "e": [7], "f": [8, 9]}
    tb_tok = {**base_tok, "c": [4, 6], "f": [8]}
    base = {
        "math": ref("base", "math", 0.75, 4, [{"id": i, "tokens": base_tok[i]} for i in "abcd"]),
        "gsm": ref("base", "gsm", 0.5, 2, [{"id": i, "tokens": base_tok[i]} for i in "ef"]),
    }
    tb_ref = {
        "math": ref("tb", "math", 0.5, 4, [{"id": i, "tokens": tb_tok[i]} for i in "dcba"]),
        "gsm": ref("tb", "gsm", 0.5, 2, [{"id": i, "tokens": tb_tok[i]} for i in "fe"]),
    }
    val_a = write_json(tmp_path / "ta/val.json", {"metrics": {"loss_main": 1.5, "ce@1": 2.5, "agree@1": 0.4}})
    val_b = write_json(
        tmp_path / "tb/val.json", {"metrics": {"loss_main": 1.45, "ce@1": 2.4, "agree@1": 0.5, "kl_base_main": 0.05}}
    )
    # head-1 AR: ta math 1/2, gsm 3/3 (pooled 4/5); tb math 2/2, gsm 0/3 (pooled 2/5)
    acc_a = {"math": {1: [c([1], [2], 2)]}, "gsm": {1: [c([3], [3], 3)]}}
    acc_b = {"math": {1: [c([2], [2], 2)]}, "gsm": {1: [c([0], [3], 3)]}}
    runs = {
        "ta": fake_run(tmp_path, "ta", "MTP-D", 1, acc_a, main="base", validation=val_a, reference=base),
        "tb": fake_run(tmp_path, "tb", "no detach", 1, acc_b, main="tb", validation=val_b, reference=tb_ref),
    }
    return {
        "name": name,
        "spec": {"runs": ["ta", "tb"]},
        "prompt_sets": sets,
        "runs": runs,
        "base": {"model": "base", "reference": base},
    }


def test_tables_2_5_6_main_head_columns(tmp_path):
    data, header, shown = table(main_head_params(tmp_path, "table2"), tmp_path)
    a, b = data.iloc[0], data.iloc[1]
    assert (a["main_accuracy"], a["n_answers"], b["main_accuracy"]) == pytest.approx((4 / 6, 6, 0.5))
    assert a["main_accuracy_stderr"] == pytest.approx(np.sqrt(4 / 6 * 2 / 6 / 5))
    assert (a["kl_base_main"], b["kl_base_main"]) == pytest.approx((0.0, 0.05))  # the base itself: 0
    assert (a["identical_to_base"], b["identical_to_base"]) == pytest.approx((1.0, 4 / 6))
    assert (a["main_val_ce"], b["main_val_ce"], b["head1_val_ce"], b["head1_val_agree"]) == pytest.approx(
        (1.5, 1.45, 2.4, 0.5)
    )
    assert (a["math AR"], a["gsm AR"], a["mean AR"]) == pytest.approx((0.5, 1.0, 0.8))  # pooled: 4/5
    assert (b["math AR"], b["gsm AR"], b["mean AR"]) == pytest.approx((1.0, 0.0, 0.4))
    assert header == ["Method", "K", "main acc. (n=6)", "main val CE", "KL(base‖main)", "identical to base",
                      "math", "gsm", "Mean AR"]  # fmt: skip
    assert [shown[1][h] for h in header[2:]] == ["50.0 ± 22.4", "1.4500", "0.0500", "66.7", "100.00", "0.00", "40.00"]
    five, header5, _ = table(main_head_params(tmp_path, "table5"), tmp_path)
    assert "math AR" not in five.columns and "Mean AR" not in header5
    assert five["main_accuracy"].tolist() == pytest.approx([4 / 6, 0.5])


# --------------------------------------------------------------------------------------------- Tables 3 and 4


def test_table3_the_trunks_configuration(tmp_path):
    """A column per trunk, as the paper's Table 3 sets its 2B dense and A1B MoE side by side; expert rows only
    where the trunk has experts."""
    from mtp_core.papers.p2.report import config_table

    dense = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": True,
             "model_type": "qwen3", "intermediate_size": 128, "max_position_embeddings": 2048, "rms_norm_eps": 1e-6,
             "rope_parameters": {"rope_theta": 1e6}, "num_hidden_layers": 2, "vocab_size": 320}  # fmt: skip
    moe = {**dense, "model_type": "glm4_moe", "hidden_size": 48, "head_dim": 16, "use_qk_norm": True,
           "num_hidden_layers": 3, "first_k_dense_replace": 1, "moe_intermediate_size": 24, "n_routed_experts": 8,
           "n_shared_experts": 1, "num_experts_per_tok": 2}  # fmt: skip
    models = [{"name": "d", "heads": [1, 4]}, {"name": "m", "heads": [1]}]
    config_table({"models": models}, tmp_path / "t3.csv", tmp_path / "t3.md", [dense, moe])
    frame = pd.read_csv(tmp_path / "t3.csv", dtype=str, keep_default_na=False)
    assert list(frame.columns) == ["Hyperparameter", "d", "m"]
    rows = {r[0]: (r[1], r[2]) for r in frame.values.tolist()}
    assert rows == {"dim": ("64", "48"), "n_heads": ("4", "4"), "n_kv_heads": ("2", "2"), "head_dim": ("16", "16"),
                    "embedding_tie": ("True", "True"), "qk_norm": ("True", "True"), "ffn_hidden_dim": ("128", "128"),
                    "max_seq_len": ("2048", "2048"), "rope_theta": ("1000000.0", "1000000.0"),
                    "norm_eps": ("1e-06", "1e-06"), "decoder_layers": ("2", "3"), "dense_layers": ("2", "1"),
                    "expert_hidden_dim": ("-", "24"), "num_experts": ("-", "8"), "num_shared_experts": ("-", "1"),
                    "top_k": ("-", "2"), "vocab_size": ("320", "320"), "num_mtp_heads": ("1, 4", "1"),
                    "mtp_head_layers": ("1", "1"), "mtp_dense_or_moe": ("dense", "dense")}  # fmt: skip
    llama = {**dense, "model_type": "llama", "head_dim": 32, "rope_parameters": None, "rope_theta": 5e5}
    config_table({"models": models[:1]}, tmp_path / "t3.csv", tmp_path / "t3.md", [llama])
    rows = dict(pd.read_csv(tmp_path / "t3.csv", dtype=str).values.tolist())
    assert (rows["head_dim"], rows["qk_norm"], rows["rope_theta"]) == ("32", "False", "500000.0")


def test_table4_the_training_as_run(tmp_path):
    train = {"lr": 1e-3, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1, "grad_clip": 1.0, "warmup_steps": 4,
             "schedule": "wsd", "decay_fraction": 0.1, "min_lr_ratio": 0.0, "max_steps": 48, "global_batch_size": 8}  # fmt: skip
    method = {"seq_len": 128, "num_heads": 4, "trunk": "frozen", "loss": {"alpha": 0.3, "beta": 0.5, "topn": 10000}}
    rec = write_json(tmp_path / "r/train.json", {"steps": 40})  # a record's own step count wins over max_steps
    runs = {"r": {"title": "MTP-D", "heads": 4, "train": train, "method": method, "record": rec}}
    data, _, _ = table({"name": "table4", "spec": {"runs": ["r"]}, "prompt_sets": [], "runs": runs}, tmp_path)
    r = data.iloc[0]
    assert (r["K"], r["steps"], r["batch_tokens"], r["max_lr"], r["warmup_steps"]) == (4, 40, 1024, 0.001, 4)
    assert (r["alpha"], r["beta"], r["topn"], r["kl"], r["detach"], r["teacher"]) == (
        0.3,
        0.5,
        10000,
        "forward",
        True,
        "main",
    )
    assert r["schedule"] == "wsd (decay 0.1), min ratio 0.0" and r["optimizer"] == "AdamW (0.9, 0.95) eps 1e-08 wd 0.1"


# ------------------------------------------------------------------------------------------------- Table 8


def speed_params(tmp_path: Path, name: str = "table8") -> dict:
    """Two strategies under two protocols; each row's file holds what `speed.speed_job` writes. The pooled speedup
    (all tokens over all time) differs from the mean of the benchmarks' (MTP-D: 1.1 against (1.5 + 0.9) / 2)."""
    rows, paths = [], {}
    spec = {  # label: (title, kv, tok/s, vs baseline, modeled, vs greedy, tau, per set {set: vs baseline})
        "a-h1": ("MTP K=1", True, 10.0, 1.0, 1.0, 0.7, 1.2, {"math": 1.0, "code": 1.0}),
        "b-h4": ("MTP-D K=4", True, 12.0, 1.1, 1.25, 0.84, 1.9, {"math": 1.5, "code": 0.9}),
        "a-h1-nokv": ("MTP K=1", False, 4.0, 1.0, None, 1.1, 1.2, {"math": 1.0, "code": 1.0}),
        "b-h4-nokv": ("MTP-D K=4", False, 7.0, 1.6, None, 1.9, 1.9, {"math": 2.0, "code": 1.5}),
    }
    for label, (title, kv, tps, vs_b, mod, vs_g, tau, per) in spec.items():
        st = {"tokens_per_s": tps, "speedup_vs_baseline": vs_b, "speedup_vs_greedy": vs_g, "heads": {"tau": tau},
              "identical_fraction": 1.0, "modeled_speedup_vs_baseline": mod}  # fmt: skip
        per_cat = {ps: {"tokens_per_s": tps * v / vs_b, "speedup_vs_baseline": v} for ps, v in per.items()}
        paths[label] = write_json(tmp_path / "speed" / f"{label}.json", {"decode_stats": st, "per_category": per_cat})
        protocol = "KV cache" if kv else "no KV cache (App. D)"
        run, depth = label.split("-")[0], int(label.split("-")[1][1:])
        rows.append({"label": label, "run": run, "depth": depth, "title": title, "kv_cache": kv, "protocol": protocol})
    return {"name": name, "spec": {}, "prompt_sets": ["math", "code"], "runs": {},
            "speed": {"rows": rows, "paths": paths, "baseline": "a-h1"}}  # fmt: skip


def test_table8_speedups_per_protocol(tmp_path):
    data, header, shown = table(speed_params(tmp_path), tmp_path)
    mean, pooled, modeled = (f"speedup vs baseline ({w})" for w in ("measured, mean of benchmarks",
                                                                    "measured, pooled", "modeled, pooled"))  # fmt: skip
    assert header == ["Strategy", "D", "Protocol", mean, pooled, modeled, "vs greedy (measured)", "τ", "identical"]
    assert [(r["Strategy"], r["Protocol"], r[mean], r[pooled], r[modeled]) for r in shown] == [
        ("MTP K=1", "KV cache", "1.000", "1.000", "1.000"), ("MTP-D K=4", "KV cache", "1.200", "1.100", "1.250"),
        ("MTP K=1", "no KV cache (App. D)", "1.000", "1.000", "-"),
        ("MTP-D K=4", "no KV cache (App. D)", "1.750", "1.600", "-")]  # fmt: skip
    assert [r["τ"] for r in shown] == ["1.200", "1.900", "1.200", "1.900"] and shown[3][
        "vs greedy (measured)"
    ] == "1.900"
    per_set = data[(data["label"] == "b-h4-nokv") & (data["set"] != "all")]
    assert dict(zip(per_set["set"], per_set["speedup_vs_baseline"])) == {"math": 2.0, "code": 1.5}
