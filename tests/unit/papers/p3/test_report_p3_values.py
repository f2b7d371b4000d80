"""Paper 3's reported numbers cell by cell: Tables 1-2 and the ablations (`p3_table`), the bars of Figures 4-5
(`category_figure`) and the curves of Figure 2 (`layer_curves`, `summarize`, `alignment_figure`) against values
written into synthetic result files (every one distinct) or a hand-made frame. Expected values come from the spec
the files were written from, never through `mtp_core.papers.p3.report`."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from mtp_core.papers.p3.alignment import summarize
from mtp_core.papers.p3.figures import alignment_figure, category_figure, layer_curves
from mtp_core.papers.p3.report import REFERENCE_TITLE, p3_table
from mtp_core.results import load_results
from mtp_core.results.write import make_result, write_result

CATS = ("coding", "writing", "math")
METHODS = {
    "pld": ("PLD", {"decoder": "prompt-lookup"}),
    "probing": ("Ours", {"decoder": "probing", "masks_per_step": 2, "expansion": "fixed", "branching": [3, 3]}),
}
BCS = (10, 30)


def write(path: Path, decoder: str, params: dict, s: dict) -> str:
    """A decode result whose statistics are `s` (tau pooled over prompts and its standard error tau_se, forwards,
    tps, identical, n, per-category tau). The mean of per-prompt ratios is written too, and differs: not the τ."""
    stats = {
        "tokens_per_forward": {"mean": s["tau"] + 0.5, "std": 0.3, "pooled": s["tau"], "pooled_se": s["tau_se"]},
        "effective_k": {"mean": s["tau"] + 5.0, "std": 0.0},  # not the table's τ
        "new_tokens": {"mean": 10.0, "std": 0.0, "total": 10 * s["n"]},
        "forward_passes": s["forwards"],
        "tokens_per_s": s["tps"],
        "identical_fraction": s["identical"],
    }
    per_cat = {
        c: {**stats, "tokens_per_forward": {"mean": t + 0.5, "std": 0.1, "pooled": t, "pooled_se": 0.01}}
        for c, t in zip(CATS, s["cat_tau"])
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    write_result(
        str(path),
        make_result(
            kind="decode",
            paper="p3",
            run=path.parent.name,
            model=path.parent.name,
            task="specbench",
            decoder={"name": decoder, "lossless": True, "params": params},
            n=s["n"],
            decode_stats=stats,
            per_category=per_cat,
            settings={},
            scale="tiny",
            config_hash="0" * 12,
        ),
    )
    return str(path)


@pytest.fixture
def experiment(tmp_path) -> tuple[list[dict], dict, pd.DataFrame]:
    """Two models x two methods, each job with its own greedy run (different speeds) and BC 10 and 30; every
    statistic distinct. Returns (settings, {path: stats}, loaded results)."""
    settings, stats, i = [], {}, 0
    for model in ("ma", "mb"):
        for method, (title, params) in METHODS.items():
            i += 1
            ref = tmp_path / model / f"{method}-greedy.json"
            stats[str(ref)] = {
                "tau": 1.0 + 0.001 * i,
                "tau_se": 0.0,
                "forwards": 100 + i,
                "tps": 40.0 + 3 * i,
                "identical": 1.0,
                "n": 8,
                "cat_tau": [1.0] * 3,
            }
            write(ref, "greedy", {}, stats[str(ref)])
            for bc in BCS:
                i += 1
                path = tmp_path / model / f"{method}-bc{bc}.json"
                s = {
                    "tau": 1.2 + 0.01 * i,
                    "tau_se": 0.02 * i,
                    "forwards": 60 + i,
                    "tps": 30.0 + 2.5 * i,
                    "identical": 1.0 - 0.125 * (i % 3),
                    "n": 8,
                    "cat_tau": [1.1 + 0.01 * i + 0.1 * c for c in range(3)],
                }
                stats[str(path)] = s
                write(path, params["decoder"], {**params, "bc": bc}, s)
                settings.append(
                    {
                        "model": model,
                        "method": method,
                        "title": title,
                        "bc": bc,
                        "path": str(path),
                        "reference": str(ref),
                        "params": {**params, "bc": bc},
                    }
                )
    return settings, stats, load_results(list(stats))


def test_table1_every_cell_by_hand(experiment):
    settings, stats, frame = experiment
    d = p3_table("table1", frame, settings).data
    assert d[["model", "title"]].values.tolist() == [
        [m, t] for m in ("ma", "mb") for t in (REFERENCE_TITLE, "PLD", "Ours")
    ]
    for row in d.to_dict("records"):
        for bc in BCS:
            c = f"BC{bc} "
            got = [row[c + "τ (tokens/forward, incl. bonus)"], row[c + "forwards"], row[c + "tok/s"]]
            got += [row[c + "× greedy"], row[c + "identical"]]
            if row["title"] == REFERENCE_TITLE:  # the mean over the model's jobs' greedy runs
                refs = [stats[s["reference"]] for s in settings if s["model"] == row["model"] and s["bc"] == bc]
                assert len(refs) == 2
                want = [sum(r[k] for r in refs) / 2 for k in ("tau", "forwards", "tps")] + [1.0, 1.0]
                assert got == pytest.approx(want) and math.isnan(row[c + "τ se"])
                continue
            (s,) = [s for s in settings if (s["model"], s["title"], s["bc"]) == (row["model"], row["title"], bc)]
            st, ref = stats[s["path"]], stats[s["reference"]]
            assert got == pytest.approx([st["tau"], st["forwards"], st["tps"], st["tps"] / ref["tps"], st["identical"]])
            assert row[c + "τ se"] == pytest.approx(st["tau_se"])


def test_table1_markdown_cells(experiment):
    settings, stats, frame = experiment
    table = p3_table("table1", frame, settings)
    shown = table.display()
    st = stats[settings[1]["path"]]  # ma, PLD, BC 30
    row = shown[(shown["model"] == "ma") & (shown["title"] == "PLD")].iloc[0]
    assert row["BC30 τ (tokens/forward, incl. bonus)"] == f"{st['tau']:.2f} ± {st['tau_se']:.2f}"
    assert row["BC30 forwards"] == f"{st['forwards']:.0f}" and row["BC30 tok/s"] == f"{st['tps']:.1f}"
    assert row["BC30 identical"] == f"{st['identical']:.2f}"
    assert "BC30 τ se" not in shown.columns


def test_table2_index_masks_and_branching(experiment):
    settings, stats, frame = experiment
    d = p3_table("table2", frame, settings).data
    assert list(d.columns[:4]) == ["model", "masks", "branching", "title"]
    assert d[["model", "masks", "branching", "title"]].values.tolist() == [
        ["ma", 1, "dynamic", "PLD"],
        ["ma", 2, "fixed [3, 3]", "Ours"],
        ["mb", 1, "dynamic", "PLD"],
        ["mb", 2, "fixed [3, 3]", "Ours"],
    ]
    ours = d[(d["model"] == "mb") & (d["title"] == "Ours")].iloc[0]
    (s,) = [s for s in settings if (s["model"], s["method"], s["bc"]) == ("mb", "probing", 10)]
    assert ours["BC10 × greedy"] == pytest.approx(stats[s["path"]]["tps"] / stats[s["reference"]]["tps"])


def drawn(monkeypatch, draw, *args):
    """The Figure `draw(*args, png, pdf)` builds (its saving replaced by a capture)."""
    import mtp_core.papers.p3.figures as p3_figures

    captured = []
    monkeypatch.setattr(p3_figures, "save_figure", lambda fig, png, pdf: captured.append(fig))
    draw(*args, "f.png", "f.pdf")
    (fig,) = captured
    return fig


def test_category_figure_bars(experiment, monkeypatch):
    settings, stats, frame = experiment
    ma = [s for s in settings if s["model"] == "ma"]
    ax = drawn(monkeypatch, category_figure, frame, ma).axes[0]
    bars = {c.get_label(): c for c in ax.containers}
    assert list(bars) == ["PLD, BC=10", "PLD, BC=30", "Ours, BC=10", "Ours, BC=30"]
    for s in ma:
        c = bars[f"{s['title']}, BC={s['bc']}"]
        assert [p.get_height() for p in c.patches] == pytest.approx(stats[s["path"]]["cat_tau"])
        assert c.patches[0].get_alpha() == pytest.approx(0.35 + 0.65 * (BCS.index(s["bc"]) + 1) / 2)
    assert [t.get_text() for t in ax.get_xticklabels()] == list(CATS)
    centres = [sum(c.patches[k].get_x() + c.patches[k].get_width() / 2 for c in bars.values()) / 4 for k in range(3)]
    assert centres == pytest.approx([0.0, 1.0, 2.0])  # each category's bars sit around its tick


# ---------------------------------------------------------------------------------------------------- Figure 2

ALIGN = pd.DataFrame(
    {  # three masks x two layers; masks 1 and 3 accepted
        "prompt": ["a"] * 6,
        "category": ["c"] * 6,
        "t": [1, 1, 2, 2, 3, 3],
        "layer": [0, 1, 0, 1, 0, 1],
        "cosine": [0.2, 0.9, 0.1, 0.3, 0.4, 0.7],
        "accepted": [True, True, False, False, True, True],
        "rank": [0, 0, 5, 5, 0, 0],
    }
)


def test_alignment_summary_and_curves_by_hand(monkeypatch):
    s = summarize(ALIGN)
    assert s["masks"] == 3 and s["accepted_rate"] == pytest.approx(2 / 3)  # each mask once, not once per layer
    assert s["layers"][0]["accepted"] == {"mean": pytest.approx(0.3), "std": pytest.approx(math.sqrt(0.02)), "n": 2}
    assert s["layers"][1]["accepted"] == {"mean": pytest.approx(0.8), "std": pytest.approx(math.sqrt(0.02)), "n": 2}
    assert s["layers"][1]["rejected"] == {"mean": pytest.approx(0.3), "std": None, "n": 1}
    curves = layer_curves(ALIGN)
    acc = curves[curves["outcome"] == "accepted"].sort_values("layer")
    assert acc["mean"].tolist() == pytest.approx([0.3, 0.8]) and acc["n"].tolist() == [2, 2]
    assert acc["std"].tolist() == pytest.approx([math.sqrt(0.02)] * 2)
    rej = curves[curves["outcome"] == "rejected"].sort_values("layer")
    assert rej["mean"].tolist() == pytest.approx([0.1, 0.3]) and rej["std"].isna().all()

    ax = drawn(monkeypatch, alignment_figure, curves).axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines) == ["accepted (n=2)", "rejected (n=1)"]
    assert list(lines["accepted (n=2)"].get_ydata()) == pytest.approx([0.3, 0.8])
    assert list(lines["rejected (n=1)"].get_xdata()) == [0, 1]
    band = ax.collections[0].get_paths()[0].vertices[:, 1]  # the accepted band spans mean ± std
    assert band.min() == pytest.approx(0.3 - math.sqrt(0.02)) and band.max() == pytest.approx(0.8 + math.sqrt(0.02))
