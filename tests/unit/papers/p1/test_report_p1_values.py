"""Paper 1's reported numbers cell by cell: Tables 1-5 (`p1_table`) and the series of Figures 5/9 (`pareto_figure`)
and 7-8/10-11 (`dynamics_figure`) against values written into synthetic result files, every one distinct, so
that a swapped column, a wrong row or a wrong scale shows. Expected values are read from the spec the files were
written from, never through `mtp_core.papers.p1.report`."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pandas as pd
import pytest

from mtp_core.papers.p1.figures import dynamics_figure, pareto_figure
from mtp_core.papers.p1.report import p1_table
from mtp_core.results import load_results
from mtp_core.results.write import make_result, write_result

FLEX, STRICT, ROUGE = "exact_match,flexible-extract", "exact_match,strict-match", "rougeL,none"
MODELS = {"main": "llama", "qwen_main": "qwen"}
CHAT = {"llama": True, "qwen": False}
STATIC_K, TAUS = (1, 2, 10), (0.99, 0.9, 0.6)


def decoders() -> list[tuple[str, dict, str]]:
    """(decoder, params, the table's setting label) of the sweep, in the table's row order."""
    out = [("static-k", {"k": k}, f"Static k={k}") for k in STATIC_K]
    return out + [("conf-adapt", {"tau": t, "k_max": 16}, f"ConfAdapt (τ = {t:g})") for t in TAUS]


def write(tmp: Path, run: str, model: str, task: str, decoder: str, params: dict, cell: dict) -> str:
    """One result file; `cell` holds the value (a fraction), stderr, effective k and its std, and n."""
    metrics = {STRICT: {"value": 0.01, "stderr": 0.001}, FLEX: {"value": cell["v"], "stderr": cell["se"]}}
    if task == "cnn":  # ROUGE-L first, a flexible-extract that the table must not pick (it names rougeL)
        metrics = {ROUGE: {"value": cell["v"], "stderr": cell["se"]}, FLEX: {"value": 0.5, "stderr": 0.1}}
    path = tmp / run / task / f"{decoder}{''.join(f'-{k}{v}' for k, v in params.items())}.json"
    write_result(
        str(path),
        make_result(
            kind="eval",
            paper="p1",
            run=run,
            model=model,
            task=task,
            decoder={"name": decoder, "lossless": decoder == "greedy", "params": params},
            n=cell["n"],
            decode_stats={
                "tokens_per_forward": {"mean": cell["ek"] + 0.5, "std": 9.0},  # not the table's Eff. k
                "effective_k": {"mean": cell["ek"], "std": cell["eks"]},
                "new_tokens": {"mean": 30.0, "std": 2.0, "total": 300},
                "forward_passes": 100,
            },
            settings={"apply_chat_template": CHAT[model]},
            scale="tiny",
            config_hash="0" * 12,
            metrics=metrics,
        ),
    )
    return str(path)


@pytest.fixture
def spec(tmp_path) -> tuple[dict, list[str]]:
    """Results of two runs on two models and two tasks (gsm8k: strict-match listed first, the table picks
    flexible-extract; cnn: ROUGE-L, shown raw), plus each model's step-0 baseline and a checkpoint of main; cnn has
    no Static k=10 result for main. Every number differs. Returns ({(run label, task, setting): cell}, paths)."""
    cells, paths, i = {}, [], 0
    jobs = [(run, MODELS[run], run, decoders()) for run in MODELS]
    jobs += [(f"{m}@step0", m, None, [("greedy", {}, "Baseline Step 0, k=1")]) for m in ("llama", "qwen")]
    jobs += [("main@step50", "llama", None, decoders()[:2])]
    for label, model, _, decs in jobs:
        for task in ("gsm8k", "cnn"):
            for decoder, params, setting in decs:
                if (label, task, setting) == ("main", "cnn", "Static k=10"):
                    continue
                i += 1
                cell = {"v": 0.2 + 0.013 * i, "se": 0.001 * i, "ek": 1.0 + 0.07 * i, "eks": 0.003 * i, "n": 40 + i}
                cells[(label, task, setting)] = cell
                paths.append(write(tmp_path, label, model, task, decoder, params, cell))
    random.Random(1).shuffle(paths)
    return cells, paths


def test_every_cell_of_a_table_by_hand(spec):
    cells, paths = spec
    table = p1_table(load_results(paths), runs=["qwen_main", "main"], tasks=["gsm8k", "cnn"], metrics={"cnn": ROUGE})
    d = table.data
    settings = ["Baseline Step 0, k=1"] + [s for _, _, s in decoders()]
    assert d["setting"].tolist() == settings * 2 and d["run"].tolist() == ["qwen_main"] * 7 + ["main"] * 7
    assert (
        d["block"].tolist() == ["qwen_main (qwen) · Chat Template: Off"] * 7 + ["main (llama) · Chat Template: On"] * 7
    )
    assert d["k"].tolist()[:7] == [1, 1, 2, 10, pd.NA, pd.NA, pd.NA]
    assert d["tau"].tolist()[4:7] == [0.99, 0.9, 0.6]
    columns = {"gsm8k": ("gsm8k Acc. (%)", 100.0), "cnn": ("cnn rougeL", 1.0)}
    for row in d.to_dict("records"):
        source = f"{MODELS[row['run']]}@step0" if row["setting"].startswith("Baseline") else row["run"]
        for task, (head, scale) in columns.items():
            cell = cells.get((source, task, row["setting"]))
            got = [row[head], row[f"{head} stderr"], row[f"{task} Eff. k"], row[f"{task} Eff. k std"]]
            if cell is None:  # main has no Static k=10 on cnn
                assert (row["run"], task, row["setting"]) == ("main", "cnn", "Static k=10")
                assert all(math.isnan(x) for x in got) and pd.isna(row[f"{task} n"])
                continue
            want = [cell["v"] * scale, cell["se"] * scale, cell["ek"], cell["eks"]]
            assert got == pytest.approx(want), (row["run"], row["setting"], task)
            assert row[f"{task} n"] == cell["n"]
    shown = table.display()
    assert list(shown.columns) == ["block", "setting", "gsm8k Acc. (%)", "gsm8k Eff. k", "cnn rougeL", "cnn Eff. k"]
    first = cells[("qwen@step0", "gsm8k", "Baseline Step 0, k=1")]
    assert shown.loc[0, "gsm8k Acc. (%)"] == f"{100 * first['v']:.1f} ± {100 * first['se']:.1f}"
    assert shown.loc[0, "gsm8k Eff. k"] == f"{first['ek']:.2f} ± {first['eks']:.2f}"
    cnn = cells[("qwen@step0", "cnn", "Baseline Step 0, k=1")]
    assert shown.loc[0, "cnn rougeL"] == f"{cnn['v']:.3f} ± {cnn['se']:.3f}"
    assert shown.loc[10, "cnn rougeL"] == "-"
    assert shown["block"].tolist() == [d["block"].iloc[0]] + [""] * 6 + [d["block"].iloc[7]] + [""] * 6


def test_the_metric_without_a_configured_one(tmp_path):
    """A task without a configured metric shows exact_match,flexible-extract when it has it (tested above, listed
    second), else its first metric key."""
    paths = []
    for label, decoder, params, loose in (("m@step0", "greedy", {}, 0.5), ("r", "static-k", {"k": 2}, 0.25)):
        path = tmp_path / label / "ifeval.json"
        metrics = {"prompt_level_loose_acc,none": {"value": loose, "stderr": 0.05}, "inst_level": {"value": 0.9}}
        write_result(
            str(path),
            make_result(
                kind="eval",
                paper="p1",
                run=label,
                model="m",
                task="ifeval",
                decoder={"name": decoder, "lossless": False, "params": params},
                n=8,
                decode_stats={},
                settings={},
                scale="tiny",
                config_hash="0" * 12,
                metrics=metrics,
            ),
        )
        paths.append(str(path))
    d = p1_table(load_results(paths)).data
    assert d["ifeval Acc. (%)"].tolist() == [50.0, 25.0] and d["ifeval Acc. (%) stderr"].tolist() == [5.0, 5.0]


def _series(ax) -> dict[str, tuple[list, list, list]]:
    """Per errorbar label: x, y and the half-length of each y error bar, as drawn."""
    out = {}
    for c in ax.containers:
        line, _, bars = c.lines
        err = [abs(seg[1][1] - seg[0][1]) / 2 for seg in bars[0].get_segments()] if bars else []
        out[c.get_label()] = (list(line.get_xdata()), list(line.get_ydata()), err)
    return out


def test_pareto_figure_series(spec, tmp_path):
    cells, paths = spec
    fig = pareto_figure(
        load_results(paths), tmp_path / "f.png", tmp_path / "f.pdf", runs=["main", "qwen_main"], task="gsm8k"
    )
    assert len(fig.axes) == 2
    for ax, run in zip(fig.axes, ["main", "qwen_main"]):
        s = _series(ax)
        static = [cells[(run, "gsm8k", f"Static k={k}")] for k in STATIC_K]
        conf = [cells[(run, "gsm8k", f"ConfAdapt (τ = {t:g})")] for t in TAUS]
        base = cells[(f"{MODELS[run]}@step0", "gsm8k", "Baseline Step 0, k=1")]
        for name, want in (("Static", static), ("ConfAdapt", conf), ("Baseline Step 0, k=1", [base])):
            x, y, err = s[name]
            assert x == pytest.approx([c["ek"] for c in want]), (run, name)
            assert y == pytest.approx([100 * c["v"] for c in want]), (run, name)
            assert err == pytest.approx([100 * c["se"] for c in want]), (run, name)
        labels = {t.get_text(): t.xy for t in ax.texts}
        assert labels["k=10"] == pytest.approx((static[2]["ek"], 100 * static[2]["v"]))
        assert labels["τ=0.6"] == pytest.approx((conf[2]["ek"], 100 * conf[2]["v"]))
        assert ax.get_ylabel() == "gsm8k: exact_match (%)" and ax.get_title() == f"{run} ({MODELS[run]})"


def test_dynamics_figure_series(spec, tmp_path):
    cells, paths = spec
    fig = dynamics_figure(
        load_results(paths), tmp_path / "f.png", tmp_path / "f.pdf", run="main", task="gsm8k", final_step=120
    )
    acc, keff, final = fig.axes[:3]
    # the settings evaluated at the checkpoint (Static k=1, k=2), at step 50 and at the final step 120
    for ax, key, scale in ((acc, "v", 100.0), (keff, "ek", 1.0)):
        lines = {line.get_label(): line for line in ax.get_lines()}
        assert list(lines) == ["Static k=1", "Static k=2"]
        for setting, line in lines.items():
            want = [cells[(label, "gsm8k", setting)][key] * scale for label in ("main@step50", "main")]
            assert list(line.get_xdata()) == [50, 120] and list(line.get_ydata()) == pytest.approx(want)
    s = _series(final)
    assert s["Static"][0] == pytest.approx([cells[("main", "gsm8k", f"Static k={k}")]["ek"] for k in STATIC_K])
    assert s["ConfAdapt"][1] == pytest.approx(
        [100 * cells[("main", "gsm8k", f"ConfAdapt (τ = {t:g})")]["v"] for t in TAUS]
    )
    assert "Baseline Step 0, k=1" not in s and final.get_title() == "final model (step 120)"
