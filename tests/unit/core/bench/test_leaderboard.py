"""The leaderboard: answer scoring equal to lm-eval's filter and metric, the plan (rows from the config and the
papers, checks before any job), a decoding job on a tiny model (per-row weights, modeled speedup, accuracy,
lossless rows identical to greedy) and its table and figure."""

from __future__ import annotations

import copy
import json
import math
import re

import pytest
import yaml

from mtp_core.bench.leaderboard import plan as lb
from mtp_core.bench.leaderboard.table import leaderboard_figure, leaderboard_frame, leaderboard_table
from mtp_core.bench.prompt_sets import accuracy, decode_prompt_set
from mtp_core.bench.protocol import encode_prompts
from mtp_core.config.settings import ConfigError
from mtp_core.decoding import register_decoder
from mtp_core.decoding.greedy import GreedyDecoder
from mtp_core.decoding.pricing import CostModel, generation_steps, modeled_speedup
from mtp_core.evaluate.answers import extract_answer, is_correct
from mtp_core.models.load import load_model
from mtp_core.papers.p1.mask_token import add_mask_token
from mtp_core.results import load_results
from mtp_core.results.write import make_result, write_result
from mtp_core.validation import validate_config
from tests.conftest import REPO

TEXTS = [
    "So 3 + 4 = 7. The answer is 7.",
    "It costs $1,250.",
    "We get 12.5 apples; 13 in all.",
    "no number",
    "#### 42",
    "-3 degrees",
    "The answer is: 2,000.",
    "1.5.",
    "7 7 7 8",
]
REFS = ["7", "1250", "13", "5", "42", "-3", "2000", "1.5", "8"]


def test_answer_scoring_equals_lm_evals_filter_and_metric():
    from lm_eval.api.metrics import exact_match_hf_evaluate
    from lm_eval.filters.extraction import RegexFilter

    spec = yaml.safe_load((REPO / "src/mtp_core/evaluate/tasks/synthetic_math_cot.yaml").read_text())
    flexible = next(f for f in spec["filter_list"] if f["name"] == "flexible-extract")["filter"][0]
    metric = spec["metric_list"][0]
    filt = RegexFilter(regex_pattern=flexible["regex_pattern"], group_select=flexible["group_select"])
    extracted = [x[0] for x in filt.apply([[t] for t in TEXTS], [{}] * len(TEXTS))]
    assert [extract_answer(t) for t in TEXTS] == extracted
    for text, ref, ex in zip(TEXTS, REFS, extracted):
        want = exact_match_hf_evaluate(
            [ex], [ref], regexes_to_ignore=metric["regexes_to_ignore"], ignore_case=metric["ignore_case"]
        )["exact_match"]
        assert is_correct(text, ref) == bool(want), (text, ref)
    assert [is_correct(t, r) for t, r in zip(TEXTS, REFS)] == [True, True, True, False, True, True, True, True, True]


def test_accuracy_with_standard_error():
    rows = [{"answer": "7"}, {"answer": "8"}, {"answer": "9"}]
    acc = accuracy(["7", "8", "1"], rows)
    assert acc["value"] == pytest.approx(2 / 3)
    assert acc["stderr"] == pytest.approx(math.sqrt((2 / 9) / 2))  # population variance / (n - 1)
    assert accuracy(["7", "8"], [{"answer": "7"}, {}]) is None  # a mixed set: no accuracy


@pytest.fixture(scope="module")
def tiny_config():
    return validate_config(yaml.safe_load((REPO / "config/tiny.yaml").read_text()))


def test_rows_come_from_the_config_and_the_papers(tiny_config):
    rows = lb.entries(tiny_config)
    assert [r.label for r in rows] == [
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
    assert rows[1].params == {"decoder": "greedy", "backend": "compiled"}
    p1 = rows[5]
    assert p1.checkpoint == "results/models/p1/main/model" and p1.model == "tiny-qwen3-math"
    probing = {r.label: r for r in rows if r.paper == "p3"}
    assert probing["p3-probing_vocab_mean-bc10-guarded"].params["adaptive"] is True
    assert "adaptive" not in probing["p3-probing_vocab_mean-bc10"].params
    assert lb.row_inputs(tiny_config) == [
        "results/models/p1/main/model",
        "results/models/p2/mtp_k1/model",
        "results/models/p2/mtpd_k4/model",
        "results/models/p4/main/model",
        "results/analysis/p4/main/selected_tau.json",
        "results/models/p5/heads/medusa/heads",
        "results/models/p5/heads/hydra/heads",
        "results/analysis/p5/hydra/gsm8k/bank.json",
    ]
    assert lb.targets(tiny_config)[0] == "results/tables/leaderboard.csv"
    paths = lb.job_results(tiny_config, "math")
    assert paths[0] == "results/decode/leaderboard/tiny-qwen3-math/prompts-math/greedy.json" and len(paths) == 17
    off = copy.deepcopy(tiny_config)
    off["papers"]["p3"]["enabled"] = False
    assert not any(r.paper == "p3" for r in lb.entries(off))


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda c: c["leaderboard"].update(model="nope"), "leaderboard.model: model 'nope' is not declared"),
        (lambda c: c["leaderboard"]["prompt_sets"].update(nope={}), "leaderboard.prompt_sets.nope: prompt set 'nope'"),
        (
            lambda c: c["leaderboard"]["baselines"]["pld"].update(depth=3),
            "leaderboard.baselines.pld: prompt-lookup: unknown parameter(s) depth",
        ),
        (lambda c: c["leaderboard"]["baselines"].update({"p1-main-static-k2": {"decoder": "greedy"}}), "is used twice"),
        (
            lambda c: c["leaderboard"].update(model="tiny-llama"),
            "papers.p1.leaderboard.p1-main-static-k2: its "
            "checkpoint is trained from 'tiny-qwen3-math', not from the leaderboard's model 'tiny-llama'",
        ),
        (lambda c: c["papers"]["p3"]["leaderboard"].update(methods=["nope"]), "papers.p3.leaderboard.methods[0]"),
        (
            lambda c: c["leaderboard"]["baselines"].update(hf={"decoder": "hf-greedy", "backend": "compiled"}),
            "leaderboard.baselines.hf: hf-greedy: backend 'compiled' is not available",
        ),
        (
            lambda c: c["leaderboard"]["baselines"]["pld"].update(backend="compiled"),
            "leaderboard.baselines.pld: prompt-lookup: the wall-clock guard (adaptive) prices eager forwards",
        ),
    ],
)
def test_bad_leaderboard_config_names_the_key(edit, message):
    raw = yaml.safe_load((REPO / "config/tiny.yaml").read_text())
    edit(raw)
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate_config(raw)


def test_modeled_speedup_prices_forwards_by_rows(tiny_llama):
    from mtp_core.decoding import GenerationResult

    cost = CostModel({1: 1.0, 4: 2.0, 8: 3.0}, online=False)
    greedy = GenerationResult(list(range(6)), [1] * 6, 3, 0.0, 0.0, "length")  # 5 one-row steps after the prefill
    tree = GenerationResult(list(range(6)), [1, 3, 2], 3, 0.0, 0.0, "length", {"chunk_rows": [0, 4, 8]})
    assert generation_steps(greedy, cost) == 5 and generation_steps(tree, cost) == 5.0
    assert modeled_speedup([tree], [greedy], cost) == pytest.approx(1.0)
    fast = GenerationResult(list(range(6)), [1, 5], 3, 0.0, 0.0, "length", {"chunk_rows": [0, 4]})
    assert modeled_speedup([fast], [greedy], cost) == pytest.approx(2.5)


@pytest.fixture(scope="module")
def student(tmp_path_factory, tiny_loaded_qwen):
    """A 'paper 1 student' of the tiny Qwen3: the base weights with a `<MTP>` row (untrained), as a checkpoint."""
    d = tmp_path_factory.mktemp("student") / "model"
    loaded = load_model(tiny_loaded_qwen[0], base_dir=tiny_loaded_qwen[1])
    add_mask_token(loaded.model, loaded.tokenizer, seed=0)
    loaded.model.save_pretrained(d)
    loaded.tokenizer.save_pretrained(d)
    return d


@pytest.fixture(scope="module")
def tiny_loaded_qwen(tmp_path_factory):
    from mtp_core.models.load import prepare_base_model
    from tests.conftest import tiny_spec

    spec = tiny_spec("qwen3", chat_template=False)
    return spec, prepare_base_model(spec, tmp_path_factory.mktemp("qwen") / "model")


def test_decoding_job_writes_a_result_per_row(tmp_path, tiny_loaded_qwen, student):
    spec, base_dir = tiny_loaded_qwen
    base = load_model(spec, base_dir=base_dir)
    mtp = load_model(spec, checkpoint=student)
    rows = [
        {"id": str(i), "category": "math_reasoning", "prompt": f"What is {i} + {i}?", "answer": str(2 * i)}
        for i in range(1, 4)
    ]
    decoders = {
        "greedy": {"decoder": "greedy"},
        "pld": {"decoder": "prompt-lookup", "num_draft": 4},
        "st": {"decoder": "static-k", "k": 2},
    }
    outs = [str(tmp_path / f"{n}.json") for n in decoders]
    decode_prompt_set(
        base,
        rows,
        decoders,
        outs,
        "math",
        "tiny",
        "h",
        max_new_tokens=8,
        batch_size=1,
        threads=1,
        warmup=0,
        repeats=1,
        paper="leaderboard",
        models={"st": mtp},
        papers={"st": "p1"},
        modeled=True,
    )
    frame = load_results(outs)
    g, p, s = (frame.iloc[i] for i in range(3))
    assert g["modeled_speedup_vs_greedy"] == pytest.approx(1.0) and g["speedup_vs_greedy"] == pytest.approx(1.0)
    assert p["identical_fraction"] == 1.0 and p["lossless"] and p["paper"] == "leaderboard"
    assert s["paper"] == "p1" and not s["lossless"] and s["modeled_speedup_vs_greedy"] > 0
    assert "accuracy" in g["metrics"] and 0 <= g["metrics"]["accuracy"]["value"] <= 1
    assert frame["settings"].iloc[0]["step_cost"]["1"] > 0
    assert list(frame["compile_s"]) == [0.0, 0.0, 0.0]  # eager rows: nothing compiled
    rows_meta = [
        {"label": "greedy", "title": "Greedy"},
        {"label": "pld", "title": "PLD"},
        {"label": "st", "title": "P1 Static k=2"},
    ]
    data = leaderboard_frame(frame, rows_meta)
    assert list(data["row"]) == ["Greedy", "PLD", "P1 Static k=2"] and list(data["lossless"]) == ["yes", "yes", "no"]
    table = leaderboard_table(frame, rows_meta)
    assert "× greedy (modeled)" in table.data.columns and "accuracy (%)" in table.data.columns
    leaderboard_figure(frame, rows_meta, tmp_path / "f.png", tmp_path / "f.pdf")
    assert (tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG"


def test_p1_decoders_report_chunk_rows(tiny_loaded_qwen, student):
    spec, _ = tiny_loaded_qwen
    mtp = load_model(spec, checkpoint=student)
    from mtp_core.decoding import build_decoder

    g = build_decoder("static-k", mtp.model, mtp.tokenizer, k=3).generate(
        [encode_prompts(mtp, [{"id": "a", "prompt": "hello"}])[0].ids], 9, mtp.stop_criteria()
    )[0]
    rows = g.extra["chunk_rows"]
    assert rows[0] == 0 and len(rows) == g.forward_passes
    assert all(r == 3 - 1 + 3 for r in rows[1:-1])  # re-fed 3 accepted tokens + 2 masks


# ------------------------------------------------------------------------------------ the table and figure by hand

ROWS_META = [  # the plan's rows (leaderboard.job_rows), in table order
    {"label": "greedy", "title": "Greedy", "paper": "base"},
    {"label": "greedy-compiled", "title": "Greedy (compiled)", "paper": "base"},
    {"label": "pld", "title": "PLD", "paper": "base"},
    {"label": "p1-main-static-k2", "title": "P1 main, Static k=2", "paper": "p1"},
    {"label": "p3-probing-bc10", "title": "P3 probing", "paper": "p3"},
    {"label": "p4-main-dmtd-tau3", "title": "P4 DMTD", "paper": "p4"},
]
GREEDY_SAMPLES = [(6, [1] * 6, {}), (4, [1] * 4, {})]
SAMPLES = {  # label -> per prompt (new tokens, accepted, the decoder's extra): the forwards the GPU tables price
    "greedy": GREEDY_SAMPLES,
    "greedy-compiled": GREEDY_SAMPLES,
    "pld": [(7, [1, 3, 2, 1], {"chunk_rows": [0, 4, 4, 1]}), (3, [1, 2], {"chunk_rows": [0, 2]})],
    "p1-main-static-k2": [(6, [1, 2, 3], {"chunk_rows": [0, 8, 8]}), (4, [1, 3], {"chunk_rows": [0, 16]})],
    "p3-probing-bc10": [(5, [1, 4], {"chunk_rows": [0, 32]}), (5, [1, 2, 2], {"chunk_rows": [0, 64, 128]})],
    "p4-main-dmtd-tau3": [
        (4, [1, 1, 1, 1], {"num_layers": 36, "layer_forwards": [[[36, 1]], [[28, 1]], [[28, 1], [8, 4]]]}),
        (2, [1, 1], {"num_layers": 36, "layer_forwards": [[[36, 1]]]}),
    ],
}


def lb_result(tmp, prompt_set: str, row: dict, i: int, accuracy: bool) -> tuple[str, dict]:
    """A row's result file on a prompt set, every statistic distinct (from i)."""
    s = {
        "n": 5 + i,
        "tps": 10.0 + 1.5 * i,
        "speedup": 0.8 + 0.07 * i,
        "modeled": 1.1 + 0.09 * i,
        "tpf": 1.0 + 0.13 * i,
        "tpf_std": 0.01 * i,
        "forwards": 100 + i,
        "identical": 1.0 - 0.05 * i,
        "acc": 0.3 + 0.02 * i,
        "acc_se": 0.001 * i,
        "compile": 0.5 * i,
    }
    path = tmp / f"prompts-{prompt_set}" / f"{row['label']}.json"
    samples = [
        {"id": str(j), "new_tokens": n, "tokens": list(range(3, 3 + n)), "accepted": acc, "prompt_tokens": 9,
         "stop_reason": "length", **({"extra": extra} if extra else {})}
        for j, (n, acc, extra) in enumerate(SAMPLES[row["label"]])
    ]  # fmt: skip
    write_result(
        str(path),
        make_result(
            kind="decode",
            paper=row["paper"],
            run="m",
            model="m",
            task=prompt_set,
            decoder={"name": "x", "lossless": row["paper"] != "p1", "params": {}},
            n=s["n"],
            decode_stats={
                # shown: pooled ± its error, not the mean of per-prompt ratios
                "tokens_per_forward": {"mean": s["tpf"] + 0.5, "pooled": s["tpf"], "pooled_se": s["tpf_std"]},
                "effective_k": {"mean": s["tpf"] + 3, "std": 0.5},  # not the table's tokens/forward
                "forward_passes": s["forwards"],
                "tokens_per_s": s["tps"],
                "speedup_vs_greedy": s["speedup"],
                "modeled_speedup_vs_greedy": s["modeled"],
                "identical_fraction": s["identical"],
                "compile_s": s["compile"],
            },
            settings={},
            scale="tiny",
            config_hash="0" * 12,
            metrics={"accuracy": {"value": s["acc"], "stderr": s["acc_se"]}} if accuracy else None,
        ),
        samples,
    )
    return str(path), s


@pytest.fixture
def board(tmp_path):
    """Every row on two prompt sets (math with accuracy, specbench without), files in scrambled order."""
    files, spec = [], {}
    for i, (ps, row) in enumerate((ps, r) for ps in ("math", "specbench") for r in ROWS_META):
        path, spec[(ps, row["label"])] = lb_result(tmp_path, ps, row, i, accuracy=ps == "math")
        files.append(path)
    order = [8, 2, 0, 11, 1, 5, 7, 3, 10, 4, 6, 9]  # a specbench file comes first
    return [files[j] for j in order], spec


def test_leaderboard_frame_every_cell_by_hand(board):
    files, spec = board
    data = leaderboard_frame(load_results(files), ROWS_META)
    assert list(zip(data["prompt_set"], data["label"])) == [
        (ps, r["label"]) for ps in ("specbench", "math") for r in ROWS_META
    ]  # prompt sets in order of first appearance (files[5] is specbench's), rows in the plan's order
    titles = {r["label"]: r["title"] for r in ROWS_META}
    for row in data.to_dict("records"):
        s = spec[(row["prompt_set"], row["label"])]
        assert row["row"] == titles[row["label"]] and row["lossless"] == ("no" if row["paper"] == "p1" else "yes")
        got = [row[c] for c in ("n", "tokens_per_s", "speedup", "speedup_modeled", "tokens_per_forward")]
        got += [row[c] for c in ("tokens_per_forward_se", "forward_passes", "identical", "compile_s")]
        want = [s["n"], s["tps"], s["speedup"], s["modeled"], s["tpf"], s["tpf_std"], s["forwards"], s["identical"]]
        want += [s["compile"]]
        assert got == pytest.approx(want), row
        compiled = spec[(row["prompt_set"], "greedy-compiled")]
        assert row["speedup_compiled"] == pytest.approx(s["tps"] / compiled["tps"])
        if row["prompt_set"] == "math":
            assert [row["accuracy"], row["accuracy_stderr"]] == pytest.approx([100 * s["acc"], 100 * s["acc_se"]])
        else:
            assert math.isnan(row["accuracy"]) and math.isnan(row["accuracy_stderr"])
    shown = leaderboard_table(load_results(files), ROWS_META).display()
    s = spec[("math", "pld")]
    row = shown[(shown["prompt set"] == "math") & (shown["label"] == "pld")].iloc[0]
    assert row["tok/s"] == f"{s['tps']:.1f}" and row["× greedy"] == f"{s['speedup']:.2f}"
    assert row["× greedy (modeled)"] == f"{s['modeled']:.2f}" and row["forwards"] == str(s["forwards"])
    assert row["tokens/forward"] == f"{s['tpf']:.2f} ± {s['tpf_std']:.2f}"
    assert row["accuracy (%)"] == f"{100 * s['acc']:.1f} ± {100 * s['acc_se']:.1f}"
    assert row["identical to greedy"] == f"{s['identical']:.2f}" and row["compile s"] == f"{s['compile']:.1f}"


def priced_by_hand(label: str, table: dict, head: dict) -> tuple[int, float]:
    """New tokens and their price in one-row steps of SAMPLES[label], from a GPU file's normalised tables: a chunk
    of r rows costs table[r]; a forward of segments (layers n, rows r) of L layers head[1] + sum n / L (table[r] -
    head[r]); a decoder recording neither runs one row per forward after the prefill."""
    tokens = steps = 0
    for n, acc, extra in SAMPLES[label]:
        tokens += n
        if "layer_forwards" in extra:
            big_l = extra["num_layers"]
            steps += sum(
                head["1"] + sum(k / big_l * (table[str(r)] - head[str(r)]) for k, r in f)
                for f in extra["layer_forwards"]
            )
        elif "chunk_rows" in extra:
            steps += sum(table[str(r)] for r in extra["chunk_rows"] if r)
        else:
            steps += len(acc) - 1
    return tokens, steps


def test_leaderboard_prices_every_rows_forwards_by_each_gpu_table(board):
    """One column per committed GPU table (bench/device_costs): the row's tokens per priced step over greedy's, by
    hand from the raw files."""
    files, _ = board
    data = leaderboard_frame(load_results(files), ROWS_META)
    paths = sorted((REPO / "src/mtp_core/bench/device_costs").glob("*.json"))
    assert {p.stem for p in paths} >= {"qwen3-4b_h200", "llama-7b_h200"}
    for p in paths:
        raw = json.loads(p.read_text())["verify_eager"]
        g_tokens, g_steps = priced_by_hand("greedy", raw["table"], raw["head"])
        for row in data.to_dict("records"):
            tokens, steps = priced_by_hand(row["label"], raw["table"], raw["head"])
            assert row[f"speedup_{p.stem}"] == pytest.approx((tokens / steps) / (g_tokens / g_steps)), (p.stem, row)
    shown = leaderboard_table(load_results(files), ROWS_META).display()
    assert "× greedy (modeled, H200, Qwen3-4B)" in shown.columns and "× compiled greedy" in shown.columns


def test_leaderboard_figure_points_by_hand(board, monkeypatch):
    import mtp_core.bench.leaderboard.table as report_lb

    files, spec = board
    captured = []
    monkeypatch.setattr(report_lb, "save_figure", lambda fig, png, pdf: captured.append(fig))
    leaderboard_figure(load_results(files), ROWS_META[::-1], "f.png", "f.pdf")  # greedy last: its line is its own
    axes = captured[0].axes
    assert [ax.get_title() for ax in axes] == [
        "specbench: agreement with greedy",
        "math: agreement with greedy",
        "math: accuracy",
    ]
    for ax, (ps, measure) in zip(axes, (("specbench", "identical"), ("math", "identical"), ("math", "acc"))):
        points = {}
        for coll in ax.collections:  # one scatter per paper
            for x, y in coll.get_offsets():
                points[coll.get_label(), round(float(x), 6)] = float(y)
        for r in ROWS_META:
            s = spec[(ps, r["label"])]
            assert points[(r["paper"], round(s["speedup"], 6))] == pytest.approx(100 * s[measure]), (ps, measure, r)
        assert {t.get_text() for t in ax.texts} == {r["title"] for r in ROWS_META}
    acc = axes[2]
    dashed = [line for line in acc.get_lines() if line.get_linestyle() == "--"]
    assert len(dashed) == 1 and dashed[0].get_ydata()[0] == pytest.approx(100 * spec[("math", "greedy")]["acc"])


@register_decoder("test-odd-prompts-altered")
class _OddAltered(GreedyDecoder):
    """Lossy stand-in: greedy, except that prompts of odd length get their first token changed."""

    lossless = False

    def generate(self, prompts, max_new_tokens, stop):
        out = super().generate(prompts, max_new_tokens, stop)
        for p, g in zip(prompts, out):
            if len(p) % 2:
                g.tokens[0] = (g.tokens[0] + 1) % 200 + 3
        return out


def test_identical_fraction_counts_prompts_equal_to_greedy(tiny_llama):
    """The leaderboard's `identical` (and paper 3's) from the bench: the share of prompts whose tokens equal
    greedy's, overall and per category, by hand from which prompts the stand-in alters."""
    from mtp_core.bench.protocol import run_bench

    rows = [
        {"id": str(i), "category": c, "prompt": p}
        for i, (c, p) in enumerate(
            [("x", "hi"), ("x", "hello there"), ("y", "what is 2 + 2"), ("x", "tell me"), ("y", "a b")]
        )
    ]
    prompts = encode_prompts(tiny_llama, rows)
    odd = [len(p.ids) % 2 == 1 for p in prompts]
    assert 0 < sum(odd) < len(odd)
    summary, _ = run_bench(
        tiny_llama, {"greedy": {}, "test-odd-prompts-altered": {}}, prompts, 4, batch_size=2, warmup=0, repeats=1
    )
    row = summary["decoders"]["test-odd-prompts-altered"]
    assert row["identical_fraction"] == pytest.approx(sum(not o for o in odd) / len(odd))
    for cat in ("x", "y"):
        members = [not o for p, o in zip(prompts, odd) if p.category == cat]
        assert row["per_category"][cat]["identical_fraction"] == pytest.approx(sum(members) / len(members))
    assert row["identical_to_greedy"] is None and summary["decoders"]["greedy"]["identical_fraction"] == 1.0


def test_report_script_writes_the_table_and_the_figure(board, tmp_path):
    """workflow/scripts/leaderboard_report.py: kind `table` writes the CSV and markdown in the plan's row order,
    kind `figure` the PNG and PDF."""
    import runpy
    from types import SimpleNamespace

    import pandas as pd

    files, spec = board
    script = str(REPO / "workflow/scripts/leaderboard_report.py")
    for kind, output in (
        ("table", {"csv": str(tmp_path / "lb.csv"), "md": str(tmp_path / "lb.md")}),
        ("figure", {"png": str(tmp_path / "lb.png"), "pdf": str(tmp_path / "lb.pdf")}),
    ):
        smk = SimpleNamespace(
            log=[str(tmp_path / f"{kind}.log")],
            input=SimpleNamespace(results=files),
            params=SimpleNamespace(rows=ROWS_META, kind=kind),
            output=SimpleNamespace(**output),
        )
        runpy.run_path(script, init_globals={"snakemake": smk}, run_name="__main__")
    table = pd.read_csv(tmp_path / "lb.csv")
    assert list(table["label"]) == [r["label"] for r in ROWS_META] * 2
    assert table["× greedy"].tolist() == pytest.approx(
        [spec[(p, lab)]["speedup"] for p, lab in zip(table["prompt set"], table["label"])]
    )
    assert re.search(r"\|\s*P1 main, Static k=2\s*\|", (tmp_path / "lb.md").read_text())
    assert (tmp_path / "lb.png").read_bytes()[:4] == b"\x89PNG" and (tmp_path / "lb.pdf").read_bytes()[:4] == b"%PDF"
