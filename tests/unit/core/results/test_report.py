"""mtp_core.results: loading result JSONs, table builders, writers, figures and the two workflow scripts."""

from __future__ import annotations

import json
import math
import re
import runpy
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from tests.conftest import REPO

from mtp_core.results import (
    ResultFileError,
    category_frame,
    decoding_speed_figure,
    decoding_table,
    evaluation_table,
    format_params,
    format_pm,
    load_results,
    make_figure,
    make_table,
    metrics_frame,
    pivot_pm,
    save_figure,
    scatter_tradeoff,
    write_table,
)
from mtp_core.results import read as results_read
from mtp_core.results import tables as results_tables
from mtp_core.results.write import make_result, write_result

SCRIPTS = REPO / "workflow" / "scripts"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def stats(tpf: float, tps: float, ek: float | None = None, n: int = 16, new: float = 40.0) -> dict:
    return {
        "tokens_per_forward": {"mean": tpf, "std": 0.25},
        "effective_k": {"mean": ek or tpf, "std": 0.5},
        "new_tokens": {"mean": new, "std": 6.0, "total": int(new * n)},
        "forward_passes": round(new * n / tpf),
        "tokens_per_s": tps,
        "wall_s": new * n / tps,
    }


def write(
    tmp: Path,
    *,
    task: str,
    decoder: str,
    params: dict | None = None,
    kind: str = "decode",
    run: str = "smollm2-135m",
    metrics: dict | None = None,
    per_category: dict | None = None,
    **kw,
) -> str:
    path = tmp / run / task / f"{decoder}{format_params(params or {})}.json"
    write_result(
        str(path),
        make_result(
            kind=kind,
            paper="base",
            run=run,
            model="smollm2-135m",
            task=task,
            decoder={"name": decoder, "lossless": decoder in ("greedy", "hf-greedy"), "params": params or {}},
            n=16,
            decode_stats=stats(**kw),
            settings={"max_new_tokens": 48},
            scale="tiny",
            config_hash="0123abcd",
            metrics=metrics,
            per_category=per_category,
        ),
    )
    return str(path)


@pytest.fixture
def decode_paths(tmp_path: Path) -> list[str]:
    """Two prompt sets x (greedy, hf-greedy, static k=3); 'code' lists hf-greedy first."""
    cats = {"writing": stats(1.0, 21.0), "math": stats(1.0, 19.0)}
    return [
        write(tmp_path, task="math", decoder="greedy", tpf=1.0, tps=20.0, per_category=cats),
        write(tmp_path, task="math", decoder="hf-greedy", tpf=1.0, tps=16.0),
        write(tmp_path, task="code", decoder="hf-greedy", tpf=1.0, tps=12.5),
        write(tmp_path, task="math", decoder="static", params={"k": 3}, tpf=2.9, tps=48.0),
        write(tmp_path, task="code", decoder="greedy", tpf=1.0, tps=25.0),
        write(tmp_path, task="code", decoder="static", params={"k": 3}, tpf=2.7, tps=55.0),
    ]


@pytest.fixture
def eval_paths(tmp_path: Path) -> list[str]:
    def em(v, s):
        return {
            "exact_match,strict-match": {"value": v - 0.1, "stderr": s},
            "exact_match,flexible-extract": {"value": v, "stderr": s},
        }

    return [
        write(tmp_path, kind="eval", task="gsm8k", decoder="greedy", tpf=1.0, tps=20.0, metrics=em(0.5, 0.1)),
        write(
            tmp_path,
            kind="eval",
            task="gsm8k",
            decoder="confadapt",
            params={"tau": 0.9},
            tpf=2.0,
            tps=35.0,
            ek=2.25,
            metrics=em(0.45, 0.1),
        ),
        write(
            tmp_path,
            kind="eval",
            task="bbh",
            decoder="greedy",
            tpf=1.0,
            tps=20.0,
            metrics={"acc,none": {"value": 0.3, "stderr": None}, "f1,none": {"value": 0.2, "stderr": 0.05}},
        ),
    ]


# --- loading ---------------------------------------------------------------------------------------------------


def test_load_results_flattens_in_path_order(decode_paths):
    f = load_results(decode_paths)
    assert list(f["path"]) == decode_paths
    assert list(f["task"]) == ["math", "math", "code", "math", "code", "code"]
    row = f.iloc[3]
    assert (row["decoder"], row["params_str"], row["label"], row["params"]) == (
        "static",
        "k=3",
        "static (k=3)",
        {"k": 3},
    )
    assert row["tokens_per_forward"] == 2.9 and row["tokens_per_forward_std"] == 0.25
    # a record without the pooled figure (written before it): all its new tokens over all its forwards, no error
    assert row["tokens_per_forward_pooled"] == 640 / 221 and math.isnan(row["tokens_per_forward_pooled_se"])
    assert row["tokens_per_s"] == 48.0 and row["forward_passes"] == round(40 * 16 / 2.9)
    assert row["new_tokens_total"] == 640 and row["n"] == 16 and row["config_hash"] == "0123abcd"
    assert f.iloc[0]["label"] == "greedy" and f.iloc[0]["params_str"] == ""
    assert load_results([]).columns.tolist() == list(results_read.RESULT_COLUMNS)


def test_format_params():
    assert format_params({"k": 3, "tau": 0.9}) == "k=3,tau=0.9"
    assert (
        format_params({"tau": 0.995, "tree": [2, 1], "x": {"b": 1, "a": 2}}) == 'tau=0.995,tree=[2,1],x={"a":2,"b":1}'
    )
    assert format_params({}) == ""


def test_metrics_and_category_frames(decode_paths, eval_paths):
    f = load_results(decode_paths + eval_paths)
    m = metrics_frame(f)
    assert len(m) == 6 and set(m["path"]) == set(eval_paths)
    flex = m[(m["decoder"] == "confadapt") & (m["filter"] == "flexible-extract")].iloc[0]
    assert (flex["metric"], flex["value"], flex["stderr"], flex["params_str"]) == ("exact_match", 0.45, 0.1, "tau=0.9")
    acc = m[m["key"] == "acc,none"].iloc[0]
    assert acc["filter"] == "none" and math.isnan(acc["stderr"])
    c = category_frame(f)
    assert list(c["category"]) == ["writing", "math"] and list(c["tokens_per_s"]) == [21.0, 19.0]
    assert metrics_frame(load_results(decode_paths)).empty


@pytest.mark.parametrize(
    "content, expect",
    [
        ("{not json", "cannot read result JSON"),
        ("[1, 2]", "expected a JSON object"),
        (
            '{"kind": "decode", "run": "r", "model": "m", "task": "t", "n": 1, "decode_stats": {}}',
            "missing field 'decoder'",
        ),
        (
            '{"kind": "decode", "run": "r", "model": "m", "task": "t", "n": "1", "decoder": {"name": "g"}, "decode_stats": {}}',
            "field 'n' must be int",
        ),
        (
            '{"kind": "decode", "run": "r", "model": "m", "task": "t", "n": 1, "decoder": {"name": "g"}, '
            '"decode_stats": {"tokens_per_s": "fast"}}',
            "non-numeric",
        ),
        (
            '{"kind": "eval", "run": "r", "model": "m", "task": "t", "n": 1, "decoder": {"name": "g"}, "decode_stats": {}, '
            '"metrics": {"acc,none": 0.5}}',
            re.escape("metrics['acc,none']"),
        ),
    ],
)
def test_malformed_result_names_file(tmp_path, decode_paths, content, expect):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    with pytest.raises(ResultFileError, match=expect) as e:
        load_results([decode_paths[0], bad])
    assert str(bad) in str(e.value) and e.value.path == str(bad)
    with pytest.raises(ResultFileError, match="missing.json"):
        load_results([tmp_path / "missing.json"])


# --- generic tables ----------------------------------------------------------------------------------------------


def test_format_pm():
    assert format_pm(0.51234, 0.0312) == "0.512 ± 0.031"
    assert format_pm(69.5, 1.25, 1) == "69.5 ± 1.2"
    assert format_pm(2.0, None, 2) == format_pm(2.0, float("nan"), 2) == "2.00"
    assert format_pm(None, 0.1) == format_pm(float("nan"), 0.1) == "-"


def _p1_frame() -> pd.DataFrame:
    rows = [
        ("confadapt", "tau=0.9", "gsm8k", 0.64, 0.013, 3.3, 1.1),
        ("static", "k=2", "gsm8k", 0.61, 0.013, 2, None),
        ("baseline", "", "gsm8k", 0.695, 0.013, 1, None),
        ("static", "k=1", "gsm8k", 0.66, 0.013, 1, None),
        ("confadapt", "tau=0.99", "gsm8k", 0.66, 0.013, 2.1, 0.6),
        ("static", "k=1", "bbh", 0.4, 0.02, 1, None),
    ]
    return pd.DataFrame(rows, columns=["decoder", "params", "task", "acc", "acc_se", "k", "k_std"])


def test_pivot_pm_row_order_and_cells():
    order = [
        ("baseline", ""),
        ("static", "k=1"),
        ("static", "k=2"),
        ("static", "k=5"),
        ("confadapt", "tau=0.99"),
        ("confadapt", "tau=0.9"),
    ]
    t = pivot_pm(
        _p1_frame(),
        ["decoder", "params"],
        "task",
        ["acc", "k"],
        ["acc_se", "k_std"],
        1,
        row_order=order,
        column_order=["bbh"],
    )
    assert list(zip(t.data["decoder"], t.data["params"])) == [o for o in order if o[1] != "k=5"]
    assert list(t.data.columns) == [
        "decoder",
        "params",
        "bbh/acc",
        "bbh/acc_se",
        "bbh/k",
        "bbh/k_std",
        "gsm8k/acc",
        "gsm8k/acc_se",
        "gsm8k/k",
        "gsm8k/k_std",
    ]
    shown = t.display()
    assert list(shown.columns) == ["decoder", "params", "bbh/acc", "bbh/k", "gsm8k/acc", "gsm8k/k"]
    assert shown["gsm8k/acc"].tolist()[:2] == ["0.7 ± 0.0", "0.7 ± 0.0"]
    assert shown["gsm8k/k"].tolist() == ["1.0", "1.0", "2.0", "2.1 ± 0.6", "3.3 ± 1.1"]
    assert shown["bbh/acc"].tolist() == ["-", "0.4 ± 0.0", "-", "-", "-"]
    # without an order: first appearance; a single index column; an order given as scalars
    t2 = pivot_pm(_p1_frame()[_p1_frame()["task"] == "gsm8k"], "params", "task", "acc", "acc_se", row_order=["", "k=1"])
    assert t2.data["params"].tolist() == ["", "k=1", "tau=0.9", "k=2", "tau=0.99"]
    assert t2.pm == {"gsm8k/acc": "gsm8k/acc_se"}


def test_pivot_pm_rejects_duplicates():
    f = pd.concat([_p1_frame(), _p1_frame().iloc[[1]]])
    with pytest.raises(ValueError, match="several rows.*'static'.*task='gsm8k'"):
        pivot_pm(f, ["decoder", "params"], "task", "acc", "acc_se")


def test_write_table_csv_and_markdown(tmp_path, monkeypatch):
    written = []
    real = results_tables.atomic_write_text
    monkeypatch.setattr(results_tables, "atomic_write_text", lambda p, s: (written.append(Path(p)), real(p, s)))
    t = pivot_pm(_p1_frame(), ["decoder", "params"], "task", ["acc", "k"], ["acc_se", "k_std"], 3)
    csv, md = write_table(t, tmp_path / "sub" / "table1")
    assert written == [csv, md] == [tmp_path / "sub" / "table1.csv", tmp_path / "sub" / "table1.md"]
    back = pd.read_csv(csv, keep_default_na=False, na_values=[""])
    assert back["gsm8k/acc"].tolist() == t.data["gsm8k/acc"].tolist()
    assert back["gsm8k/k_std"].isna().tolist() == t.data["gsm8k/k_std"].isna().tolist()
    lines = md.read_text().splitlines()
    assert lines[0].split("|")[1].strip() == "decoder" and len(lines) == 2 + len(t.data)
    assert "| 0.695 ± 0.013 " in md.read_text() and "| 1.000 " in md.read_text()  # no number re-parsing
    assert sorted(p.name for p in csv.parent.iterdir()) == ["table1.csv", "table1.md"]  # no temp files left
    write_table(pd.DataFrame({"a": [1.5]}), tmp_path / "plain")
    assert (tmp_path / "plain.md").read_text().splitlines()[-1] == "| 1.500 |"


# --- the foundation's tables -------------------------------------------------------------------------------------


def test_decoding_table_speedups_and_order(decode_paths):
    t = decoding_table(load_results(decode_paths))
    d = t.data
    assert list(d.columns) == [
        "model",
        "run",
        "prompt_set",
        "decoder",
        "params",
        "n",
        "tokens_per_s",
        "tokens_per_forward",
        "tokens_per_forward_se",
        "forward_passes",
        "new_tokens_mean",
        "speedup_vs_greedy",
        "speedup_vs_hf_greedy",
    ]
    assert list(zip(d["prompt_set"], d["decoder"])) == [
        ("math", "greedy"),
        ("math", "hf-greedy"),
        ("math", "static"),
        ("code", "hf-greedy"),
        ("code", "greedy"),
        ("code", "static"),
    ]
    assert d["speedup_vs_greedy"].tolist() == pytest.approx([1.0, 0.8, 2.4, 0.5, 1.0, 2.2])
    assert d["speedup_vs_hf_greedy"].tolist() == pytest.approx([1.25, 1.0, 3.0, 1.0, 2.0, 4.4])
    shown = t.display()
    # these records predate the pooled figure: 640 tokens over 221 forwards, without an error to show
    assert shown.loc[2, "tokens_per_forward"] == "2.90" and shown.loc[2, "forward_passes"] == "221"
    assert shown.loc[2, "tokens_per_s"] == "48.0" and shown.loc[5, "speedup_vs_hf_greedy"] == "4.40"


def test_decoding_table_without_or_with_ambiguous_reference(tmp_path, decode_paths):
    f = load_results(decode_paths)
    d = decoding_table(f[f["decoder"] != "hf-greedy"]).data
    assert d["speedup_vs_hf_greedy"].isna().all() and d["speedup_vs_greedy"].notna().all()
    extra = write(tmp_path / "dup", task="math", decoder="greedy", tpf=1.0, tps=10.0)
    with pytest.raises(ValueError, match="several 'greedy' results"):
        decoding_table(load_results(decode_paths + [extra]))
    assert decoding_table(load_results([])).data.empty


def test_evaluation_table(decode_paths, eval_paths):
    f = load_results(eval_paths + decode_paths)  # decode results have no metrics: left out
    t = evaluation_table(metrics_frame(f), f)
    d = t.data
    assert list(d.columns) == [
        "run",
        "decoder",
        "params",
        "gsm8k/exact_match,flexible-extract",
        "gsm8k/exact_match,flexible-extract_stderr",
        "gsm8k/effective_k",
        "gsm8k/effective_k_std",
        "bbh/acc,none",
        "bbh/acc,none_stderr",
        "bbh/effective_k",
        "bbh/effective_k_std",
    ]
    assert d[["decoder", "params"]].values.tolist() == [["greedy", ""], ["confadapt", "tau=0.9"]]
    assert d["gsm8k/exact_match,flexible-extract"].tolist() == [0.5, 0.45]
    assert d["gsm8k/effective_k"].tolist() == [1.0, 2.25]
    shown = t.display()
    assert shown["gsm8k/exact_match,flexible-extract"].tolist() == ["0.500 ± 0.100", "0.450 ± 0.100"]
    assert shown["gsm8k/effective_k"].tolist() == ["1.00 ± 0.50", "2.25 ± 0.50"]
    assert shown["bbh/acc,none"].tolist() == ["0.300", "-"]
    empty = load_results(decode_paths)
    assert evaluation_table(metrics_frame(empty), empty).data.empty


# --- figures -----------------------------------------------------------------------------------------------------


def test_decoding_speed_figure_deterministic(tmp_path, decode_paths):
    f = load_results(decode_paths)
    outs = []
    for i in range(2):
        png, pdf = tmp_path / f"{i}" / "speed.png", tmp_path / f"{i}" / "speed.pdf"
        decoding_speed_figure(f, png, pdf)
        outs.append((png.read_bytes(), pdf.read_bytes()))
    (png_bytes, pdf_bytes), second = outs
    assert png_bytes.startswith(PNG_MAGIC) and len(png_bytes) > 1000 and pdf_bytes.startswith(b"%PDF")
    assert b"CreationDate" not in pdf_bytes
    assert outs[0] == second
    assert sorted(p.name for p in (tmp_path / "0").iterdir()) == ["speed.pdf", "speed.png"]


def test_scatter_tradeoff_joins_points_in_order(tmp_path):
    f = pd.DataFrame(
        {
            "decoder": ["baseline", "confadapt", "static", "confadapt", "static"],
            "tau": [None, 0.9, None, 0.99, None],
            "k": [1, 3.3, 2, 2.1, 3],
            "acc": [0.7, 0.64, 0.61, 0.66, 0.53],
            "acc_se": [0.01] * 5,
            "label": ["", "τ=0.9", "k=2", "τ=0.99", "k=3"],
        }
    )
    fig = scatter_tradeoff(f, "k", "acc", "label", order="k", yerr="acc_se", xlabel="effective k")
    ax = fig.axes[0]
    lines = {c.get_label(): c.lines[0] for c in ax.containers}
    assert list(lines) == ["baseline", "confadapt", "static"]
    assert list(lines["confadapt"].get_xdata()) == [2.1, 3.3] and ax.get_xlabel() == "effective k"
    assert len(ax.texts) == 5
    save_figure(fig, tmp_path / "t.png")
    assert (tmp_path / "t.png").read_bytes().startswith(PNG_MAGIC)


# --- entry points and scripts ------------------------------------------------------------------------------------


def test_make_table_and_figure_checks(tmp_path, decode_paths):
    with pytest.raises(ValueError, match="unknown table"):
        make_table("nope", decode_paths, str(tmp_path / "a.csv"), str(tmp_path / "a.md"))
    with pytest.raises(ValueError, match="same stem|<stem>"):
        make_table("decoding", decode_paths, str(tmp_path / "a.csv"), str(tmp_path / "b.md"))
    with pytest.raises(ValueError, match="unknown figure"):
        make_figure("nope", decode_paths, str(tmp_path / "a.png"), str(tmp_path / "a.pdf"))


def _run_script(name: str, **sections) -> None:
    smk = SimpleNamespace(log=[], **{k: SimpleNamespace(**v) for k, v in sections.items()})
    runpy.run_path(str(SCRIPTS / name), init_globals={"snakemake": smk}, run_name="__main__")


def test_scripts(tmp_path, decode_paths, eval_paths):
    out = tmp_path / "tables"
    _run_script(
        "make_tables.py",
        input={"results": decode_paths},
        params={"table": "decoding"},
        output={"csv": str(out / "decoding.csv"), "md": str(out / "decoding.md")},
    )
    _run_script(
        "make_tables.py",
        input={"results": eval_paths},
        params={"table": "evaluation"},
        output={"csv": str(out / "evaluation.csv"), "md": str(out / "evaluation.md")},
    )
    assert len(pd.read_csv(out / "decoding.csv")) == 6 and len(pd.read_csv(out / "evaluation.csv")) == 2
    assert "0.450 ± 0.100" in (out / "evaluation.md").read_text()
    _run_script(
        "make_figures.py",
        input={"results": decode_paths},
        params={"figure": "decoding_speed"},
        output={"png": str(tmp_path / "f.png"), "pdf": str(tmp_path / "f.pdf")},
    )
    assert (tmp_path / "f.png").read_bytes().startswith(PNG_MAGIC) and (tmp_path / "f.pdf").stat().st_size > 0
    json.loads(Path(decode_paths[0]).read_text())  # inputs untouched
