"""Paper 1's tables and figures (mtp_core.papers.p1.report) from synthetic result JSONs, the Figure-6 analysis on a
tiny model (mtp_core.papers.p1.confidence) and the conversation rows of the Magpie ablation
(mtp_core.data.conversations). The experiment plan: test_p1_plan.py."""

from __future__ import annotations

import copy
import math
import random
from pathlib import Path

import pandas as pd
import pytest
import torch

from mtp_core.papers.p1.figures import confidence_figure, dynamics_figure, pareto_figure
from mtp_core.papers.p1.report import BASELINE_LABEL, classify, is_percent, p1_frame, p1_table, setting_label
from mtp_core.results import load_results, write_table
from mtp_core.results.write import make_result, write_result

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ACC = "exact_match,flexible-extract"
TAUS = (0.99, 0.9, 0.6)


def result(
    tmp: Path,
    run: str,
    task: str,
    decoder: str,
    params: dict,
    *,
    value: float,
    stderr: float = 0.01,
    ek: float = 1.0,
    ek_std: float | None = 0.0,
    model: str = "m",
    chat: bool = True,
    metric: str = ACC,
    n: int = 10,
) -> str:
    label = decoder + "".join(f"-{k}{v}" for k, v in params.items())
    path = tmp / run / task / f"{label}.json"
    write_result(
        str(path),
        make_result(
            kind="eval",
            paper="p1",
            run=run,
            model=model,
            task=task,
            decoder={"name": decoder, "lossless": decoder == "greedy", "params": params},
            n=n,
            decode_stats={
                "tokens_per_forward": {"mean": ek, "std": ek_std},
                "effective_k": {"mean": ek, "std": ek_std},
                "new_tokens": {"mean": 30.0, "std": 2.0, "total": 300},
                "forward_passes": 100,
                "tokens_per_s": 10.0,
                "wall_s": 30.0,
            },
            settings={"apply_chat_template": chat, "limit": n},
            scale="tiny",
            config_hash="0" * 12,
            metrics={
                metric: {"value": value, "stderr": stderr},
                "exact_match,strict-match": {"value": 0.0, "stderr": 0.0},
            },
        ),
    )
    return str(path)


def sweep_results(
    tmp: Path,
    run: str,
    task: str,
    *,
    model: str = "m",
    shuffle: int | None = 0,
    acc0: float = 0.66,
    metric: str = ACC,
    chat: bool = True,
) -> list[str]:
    """Static k=1..5 and ConfAdapt over TAUS for `run`, plus the step-0 baseline of `model`, in shuffled order."""
    specs = [("static-k", {"k": k}, acc0 - 0.05 * (k - 1), float(k), 0.0) for k in range(1, 6)]
    specs += [("conf-adapt", {"tau": t, "k_max": 16}, acc0 - 0.1 * (1 - t), 1.0 + 3 * (1 - t), 1.1) for t in TAUS]
    if shuffle is not None:
        random.Random(shuffle).shuffle(specs)
    paths = [
        result(tmp, run, task, d, p, value=v, ek=ek, ek_std=s, model=model, metric=metric, chat=chat)
        for d, p, v, ek, s in specs
    ]
    paths.append(
        result(
            tmp,
            f"{model}@step0",
            task,
            "greedy",
            {},
            value=0.695,
            stderr=0.013,
            ek=1.0,
            ek_std=0.0,
            model=model,
            metric=metric,
            chat=chat,
        )
    )
    return paths


def test_classify_and_labels():
    assert classify("static-k", {"k": 3}) == ("static", 3, None)
    assert classify("conf-adapt", {"tau": 0.9, "k_max": 16}) == ("conf", None, 0.9)
    assert classify("greedy", {}) == ("baseline", 1, None)
    assert setting_label("static", 3, None) == "Static k=3"
    assert setting_label("conf", None, 0.995) == "ConfAdapt (τ = 0.995)"
    assert setting_label("baseline", 1, None) == BASELINE_LABEL == "Baseline Step 0, k=1"
    assert is_percent("exact_match,flexible-extract") and is_percent("prompt_level_loose_acc,none")
    assert not is_percent("rougeL,none")


def test_table_rows_follow_the_paper(tmp_path):
    frame = load_results(sweep_results(tmp_path, "main", "gsm8k_cot"))
    table = p1_table(frame, runs=["main"], tasks=["gsm8k_cot"], titles={"main": "L3.1-8B-Magpie"})
    assert table.data["setting"].tolist() == [
        BASELINE_LABEL,
        "Static k=1",
        "Static k=2",
        "Static k=3",
        "Static k=4",
        "Static k=5",
        "ConfAdapt (τ = 0.99)",
        "ConfAdapt (τ = 0.9)",
        "ConfAdapt (τ = 0.6)",
    ]
    assert table.data["kind"].tolist() == ["baseline"] + ["static"] * 5 + ["conf"] * 3
    assert table.data["block"].iloc[0] == "L3.1-8B-Magpie (m) · Chat Template: On"


def test_table_values_in_percent_with_stderr_and_effective_k(tmp_path):
    frame = load_results(sweep_results(tmp_path, "main", "gsm8k_cot"))
    table = p1_table(frame)
    d = table.data.set_index("setting")
    assert d.loc[BASELINE_LABEL, "gsm8k_cot Acc. (%)"] == pytest.approx(69.5)
    assert d.loc[BASELINE_LABEL, "gsm8k_cot Acc. (%) stderr"] == pytest.approx(1.3)
    assert d.loc[BASELINE_LABEL, "gsm8k_cot Eff. k"] == 1.0
    assert d.loc["Static k=3", "gsm8k_cot Eff. k"] == 3.0
    assert d.loc["ConfAdapt (τ = 0.9)", "gsm8k_cot Eff. k"] == pytest.approx(1.3)
    assert d.loc["ConfAdapt (τ = 0.9)", "gsm8k_cot Eff. k std"] == pytest.approx(1.1)
    assert d.loc["Static k=1", "gsm8k_cot n"] == 10
    shown = table.display()
    assert list(shown.columns) == ["block", "setting", "gsm8k_cot Acc. (%)", "gsm8k_cot Eff. k"]
    row = shown[shown["setting"] == BASELINE_LABEL].iloc[0]
    assert row["gsm8k_cot Acc. (%)"] == "69.5 ± 1.3"
    assert row["gsm8k_cot Eff. k"] == "1.00 ± 0.00"
    tau = shown[shown["setting"] == "ConfAdapt (τ = 0.9)"].iloc[0]
    assert tau["gsm8k_cot Eff. k"] == "1.30 ± 1.10"
    assert tau["gsm8k_cot Acc. (%)"] == "65.0 ± 1.0"


def test_two_blocks_each_with_its_model_baseline_and_scores_shown_raw(tmp_path):
    paths = sweep_results(tmp_path, "main", "cnn", model="llama", metric="rougeL,none")
    paths += sweep_results(tmp_path, "qwen_main", "cnn", model="qwen", acc0=0.25, metric="rougeL,none", chat=False)
    table = p1_table(load_results(paths), runs=["qwen_main", "main"], tasks=["cnn"], metrics={"cnn": "rougeL,none"})
    d = table.data
    assert d["run"].tolist() == ["qwen_main"] * 9 + ["main"] * 9
    assert d["block"].iloc[0] == "qwen_main (qwen) · Chat Template: Off"
    assert "cnn rougeL" in d.columns
    assert d["cnn rougeL"].iloc[0] == pytest.approx(0.695)  # the baseline of qwen, not in percent
    shown = table.display()
    assert shown["block"].tolist()[:2] == ["qwen_main (qwen) · Chat Template: Off", ""]
    assert shown["block"].iloc[9] == "main (llama) · Chat Template: On"
    assert shown["cnn rougeL"].iloc[0] == "0.695 ± 0.013"


def test_table_written_as_csv_and_markdown(tmp_path):
    table = p1_table(load_results(sweep_results(tmp_path / "r", "main", "gsm8k_cot")))
    csv, md = write_table(table, tmp_path / "table4")
    back = pd.read_csv(csv)
    assert len(back) == 9 and "gsm8k_cot Eff. k std" in back.columns and back["block"].notna().all()
    text = md.read_text()
    assert "| Baseline Step 0, k=1 |" in text.replace("  ", " ") or "Baseline Step 0, k=1" in text
    assert "69.5 ± 1.3" in text and "3.00 ± 0.00" in text


def test_table_errors_name_the_problem(tmp_path):
    paths = sweep_results(tmp_path, "main", "gsm8k_cot")
    with pytest.raises(ValueError, match="no results for run 'bda'"):
        p1_table(load_results(paths), runs=["main", "bda"])
    no_base = [p for p in paths if "@step0" not in p]
    with pytest.raises(ValueError, match="no step-0 baseline of model 'm'"):
        p1_table(load_results(no_base))
    with pytest.raises(ValueError, match="has no metric 'rougeL,none'"):
        p1_table(load_results(paths), metrics={"gsm8k_cot": "rougeL,none"})


def test_checkpoint_results_are_not_table_rows(tmp_path):
    paths = sweep_results(tmp_path, "main", "gsm8k_cot")
    paths.append(result(tmp_path, "main@step0", "gsm8k_cot", "static-k", {"k": 1}, value=0.1))
    table = p1_table(load_results(paths))
    assert len(table.data) == 9
    assert table.data.set_index("setting").loc["Static k=1", "gsm8k_cot Acc. (%)"] == pytest.approx(66.0)


def test_pareto_and_dynamics_figures(tmp_path):
    paths = sweep_results(tmp_path, "main", "gsm8k_cot")
    for step in (0, 50):
        for k in (1, 3):
            paths.append(
                result(
                    tmp_path, f"main@step{step}", "gsm8k_cot", "static-k", {"k": k}, value=0.3 + step / 200, ek=float(k)
                )
            )
        paths.append(
            result(
                tmp_path,
                f"main@step{step}",
                "gsm8k_cot",
                "conf-adapt",
                {"tau": 0.9, "k_max": 16},
                value=0.3,
                ek=1.0 + step / 50,
            )
        )
    frame = load_results(paths)
    long = p1_frame(frame)
    assert sorted(long["step"].dropna().unique()) == [0, 50]
    pareto_figure(frame, tmp_path / "f5.png", tmp_path / "f5.pdf", runs=["main"], task="gsm8k_cot")
    fig = dynamics_figure(frame, tmp_path / "f7.png", tmp_path / "f7.pdf", run="main", task="gsm8k_cot", final_step=100)
    for name in ("f5", "f7"):
        assert (tmp_path / f"{name}.png").read_bytes()[:8] == PNG_MAGIC
        assert (tmp_path / f"{name}.pdf").read_bytes()[:4] == b"%PDF"
    acc, keff, _ = fig.axes[:3]
    assert len(acc.get_lines()) == 3  # Static k=1, k=3, ConfAdapt 0.9: the settings evaluated at checkpoints
    assert sorted(acc.get_lines()[0].get_xdata()) == [0, 50, 100]


def test_confidence_figure(tmp_path):
    frame = pd.DataFrame(
        {
            "row": range(40),
            "region": 0,
            "k": 4,
            "offset": 0,
            "confidence": [i / 40 for i in range(40)],
            "confidence_min": 0.1,
            "teacher_loss": [2 - i / 20 for i in range(40)],
            "accepted_len": 1.0,
            "in_response": True,
            "context": [f"c{i}" for i in range(40)],
        }
    )
    noise = frame.head(10).assign(in_response=False, teacher_loss=5.0)  # prompt regions: left out
    dup = frame.tail(5)  # the same contexts again: counted once
    fig = confidence_figure(pd.concat([frame, noise, dup]), tmp_path / "f6.png", tmp_path / "f6.pdf", bins=5)
    assert (tmp_path / "f6.png").read_bytes()[:8] == PNG_MAGIC
    assert "n=40 response regions" in fig.axes[0].get_title() and "Pearson r=-1.00" in fig.axes[0].get_title()


# ----------------------------------------------------------------------------------------- Figure 6 analysis


def test_confidence_analysis_on_a_tiny_model(tiny_llama):
    from mtp_core.papers.p1.confidence import COLUMNS, binned, confidence_vs_teacher_loss, correlations
    from mtp_core.papers.p1.mask_token import add_mask_token
    from mtp_core.papers.p1.train import EncodedRows

    model, tok = copy.deepcopy(tiny_llama.model), copy.deepcopy(tiny_llama.tokenizer)
    mask_id = add_mask_token(model, tok)
    teacher = copy.deepcopy(model)
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(3, 250, (6, 40), generator=g)
    lengths = torch.tensor([40, 40, 30, 25, 40, 12])
    enc = EncodedRows(tokens, lengths, torch.tensor([10, 0, 0, 5, 40, 3]))  # row 4: all prompt, no response
    kw = dict(seq_len=32, num_regions=4, mask_id=mask_id, pad_id=0, batch_size=4)
    frame = confidence_vs_teacher_loss(model, teacher, enc, k=3, **kw)
    assert list(frame.columns) == COLUMNS
    assert len(frame) > 0 and set(frame["k"]) == {3} and frame["row"].between(0, 5).all()
    assert frame["confidence"].between(0, 1).all() and (frame["teacher_loss"] >= 0).all()
    # student == teacher: the first prediction of a region (at its last ground-truth slot) is the teacher's own
    assert (frame["accepted_len"] >= 1).all()
    # with k = 1 the rollout is that one token: confidence = P(argmax) = exp(-teacher loss) exactly
    one = confidence_vs_teacher_loss(model, teacher, enc, k=1, **kw)
    assert torch.allclose(
        torch.tensor(one["confidence"].to_numpy()), torch.tensor((-one["teacher_loss"]).to_numpy()).exp(), atol=1e-5
    )
    assert (one["accepted_len"] == 1).all()
    # a region is in the response when all its targets lie at or after the row's response start
    assert not frame.loc[frame["row"] == 4, "in_response"].any()
    assert frame.loc[frame["row"].isin([1, 2]), "in_response"].all()
    first = frame[frame["row"] == 0].sort_values("region")
    assert not first["in_response"].iloc[0] and first["in_response"].iloc[-1]  # row 0's response starts at 10
    b = binned(frame, 4)
    assert b["n"].sum() == len(frame) and len(b) == 4
    assert b["confidence_mean"].is_monotonic_increasing
    c = correlations(frame)
    assert c["n"] == len(frame) and -1 <= c["pearson"] <= 1


# -------------------------------------------------------------------------------------- conversation rows


def test_first_turn_rows():
    from mtp_core.data.conversations import check_turns, first_turn_rows

    items = [
        {
            "conversations": [
                {"from": "human", "value": " Hi? "},
                {"from": "gpt", "value": "Hello."},
                {"from": "human", "value": "more"},
            ]
        },
        {
            "conversations": [
                {"from": "system", "value": "be nice"},
                {"from": "user", "value": "Q"},
                {"from": "assistant", "value": "A"},
            ]
        },
        {"conversations": [{"from": "gpt", "value": "monologue"}]},
        {"conversations": [{"from": "human", "value": "unanswered"}]},
        {"conversations": [{"from": "human", "value": "x"}, {"from": "gpt", "value": "y"}]},
    ]
    rows, counts = first_turn_rows(items)
    assert rows == [
        {"query": "Hi?", "response": "Hello."},
        {"query": "Q", "response": "A"},
        {"query": "x", "response": "y"},
    ]
    assert counts == {"conversations": 5, "used": 3, "no_user_turn": 1, "no_answer": 1}
    assert first_turn_rows(items, max_rows=1)[0] == [{"query": "Hi?", "response": "Hello."}]
    with pytest.raises(ValueError, match="turn 0: field 'value'"):
        check_turns({"conversations": [{"from": "human", "value": 3}]})


def test_read_conversations_from_local_jsonl(tmp_path):
    import json

    from mtp_core.data.conversations import first_turn_rows, read_conversations

    path = tmp_path / "magpie.jsonl"
    path.write_text(
        "\n".join(
            json.dumps(
                {
                    "uuid": str(i),
                    "conversations": [{"from": "human", "value": f"q{i}"}, {"from": "gpt", "value": f"a{i}"}],
                }
            )
            for i in range(3)
        )
        + "\n"
    )
    rows, _ = first_turn_rows(read_conversations({"kind": "sharegpt", "path": [str(path), str(path)]}))
    assert [r["query"] for r in rows] == ["q0", "q1", "q2", "q0", "q1", "q2"]
    assert not math.isnan(len(rows))
