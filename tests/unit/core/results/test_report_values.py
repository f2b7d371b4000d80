"""The foundation's reported numbers cell by cell: the decoding table, the evaluation table and the decoding speed
figure against values written into synthetic result files (every one distinct, so that a swapped column, another
row's value or a wrong reference shows). Expected values come from the spec the files were written from, never
through `mtp_core.results`."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from mtp_core.results import decoding_table, evaluation_table, figures, load_results, metrics_frame
from mtp_core.results.write import make_result, write_result

RUNS, SETS = ("smollm2", "student"), ("math", "code")
DECODERS = (("greedy", {}), ("hf-greedy", {}), ("static-k", {"k": 3}), ("conf-adapt", {"tau": 0.9}))


def write(tmp: Path, run: str, task: str, decoder: str, params: dict, s: dict, kind: str = "decode") -> str:
    path = tmp / run / task / f"{decoder}{''.join(f'-{k}{v}' for k, v in params.items())}.json"
    write_result(
        str(path),
        make_result(
            kind=kind,
            paper="base",
            run=run,
            model="smollm2",
            task=task,
            decoder={"name": decoder, "lossless": decoder.endswith("greedy"), "params": params},
            n=s["n"],
            decode_stats={
                # pooled over prompts (what the tables show) ± its error; the mean of per-prompt ratios differs
                "tokens_per_forward": {"mean": s["tpf"] + 0.5, "std": 0.3, "pooled": s["tpf"], "pooled_se": s["tpf_std"]},
                "effective_k": {"mean": s["ek"], "std": s["ek_std"]},
                "new_tokens": {"mean": s["new"], "std": 1.5, "total": 999},
                "forward_passes": s["forwards"],
                "tokens_per_s": s["tps"],
                "wall_s": 7.0,
            },
            settings={},
            scale="tiny",
            config_hash="0" * 12,
            metrics=s.get("metrics"),
        ),
    )
    return str(path)


def stats(i: int) -> dict:
    """Distinct statistics for the i-th file."""
    return {
        "n": 10 + i,
        "tpf": 1.0 + 0.11 * i,
        "tpf_std": 0.01 * i,
        "ek": 2.0 + 0.13 * i,
        "ek_std": 0.02 * i,
        "new": 30.0 + i,
        "forwards": 200 + i,
        "tps": 10.0 + 1.7 * i,
    }


@pytest.fixture
def decode_files(tmp_path) -> tuple[list[str], dict]:
    """Two runs x two prompt sets x four decoders; files listed prompt set by prompt set, run by run, decoders
    reversed in `student`'s code set (greedy last)."""
    files, spec = [], {}
    for i, (task, run, (dec, params)) in enumerate(itertools.product(SETS, RUNS, DECODERS)):
        spec[(run, task, dec)] = s = stats(i)
        files.append(write(tmp_path, run, task, dec, params, s))
    files[-4:] = files[-4:][::-1]
    return files, spec


def test_decoding_table_every_cell_by_hand(decode_files):
    files, spec = decode_files
    d = decoding_table(load_results(files)).data
    keys = [(r, t) for t in SETS for r in RUNS]
    decs = [[d_ for d_, _ in DECODERS]] * 3 + [[d_ for d_, _ in DECODERS][::-1]]
    assert list(zip(d["run"], d["prompt_set"], d["decoder"])) == [
        (r, t, dec) for (r, t), ds in zip(keys, decs) for dec in ds
    ]
    for row in d.to_dict("records"):
        s = spec[(row["run"], row["prompt_set"], row["decoder"])]
        greedy, hf = spec[(row["run"], row["prompt_set"], "greedy")], spec[(row["run"], row["prompt_set"], "hf-greedy")]
        got = [row[c] for c in ("n", "tokens_per_s", "tokens_per_forward", "tokens_per_forward_se")]
        got += [row[c] for c in ("forward_passes", "new_tokens_mean", "speedup_vs_greedy", "speedup_vs_hf_greedy")]
        want = [s["n"], s["tps"], s["tpf"], s["tpf_std"], s["forwards"], s["new"], s["tps"] / greedy["tps"]]
        assert got == pytest.approx(want + [s["tps"] / hf["tps"]]), row
    assert d.loc[2, "params"] == "k=3" and d.loc[0, "params"] == "" and d["model"].eq("smollm2").all()


def test_evaluation_table_every_cell_by_hand(tmp_path):
    """Two runs, three tasks (gsm8k: flexible-extract listed second; bbh: its first key, no flexible-extract;
    ifeval: only on one run), two decoders each: every cell from its own file."""
    files, spec = [], {}
    tasks = {"gsm8k": ["exact_match,strict-match", "exact_match,flexible-extract"], "bbh": ["acc,none", "f1,none"]}
    for i, (run, task, (dec, params)) in enumerate(itertools.product(RUNS, tasks, DECODERS[2:]), start=1):
        s = stats(i)
        s["metrics"] = {
            key: {"value": 0.1 * j + 0.01 * i, "stderr": 0.001 * i + 0.1 * j} for j, key in enumerate(tasks[task])
        }
        spec[(run, task, dec)] = s
        files.append(write(tmp_path, run, task, dec, params, s, kind="eval"))
    s = stats(50) | {"metrics": {"prompt_level_loose_acc,none": {"value": 0.77, "stderr": None}}}
    spec[("student", "ifeval", "static-k")] = s
    files.append(write(tmp_path, "student", "ifeval", "static-k", {"k": 3}, s, kind="eval"))
    frame = load_results(files)
    t = evaluation_table(metrics_frame(frame), frame)
    d = t.data
    assert d[["run", "decoder", "params"]].values.tolist() == [
        [r, dec, p] for r in RUNS for dec, p in (("static-k", "k=3"), ("conf-adapt", "tau=0.9"))
    ]
    primary = {"gsm8k": "exact_match,flexible-extract", "bbh": "acc,none", "ifeval": "prompt_level_loose_acc,none"}
    for row in d.to_dict("records"):
        for task, key in primary.items():
            s = spec.get((row["run"], task, row["decoder"]))
            got = [row[f"{task}/{key}"], row[f"{task}/{key}_stderr"], row[f"{task}/effective_k"]]
            got.append(row[f"{task}/effective_k_std"])
            if s is None:
                assert all(v != v for v in got), (row, task)  # NaN: no such result
                continue
            m = s["metrics"][key]
            want = [m["value"], m["stderr"] if m["stderr"] is not None else float("nan"), s["ek"], s["ek_std"]]
            assert got == pytest.approx(want, nan_ok=True), (row, task)
    shown = t.display()
    s = spec[("smollm2", "gsm8k", "conf-adapt")]
    flex = s["metrics"]["exact_match,flexible-extract"]
    assert shown.loc[1, "gsm8k/exact_match,flexible-extract"] == f"{flex['value']:.3f} ± {flex['stderr']:.3f}"
    assert shown.loc[1, "gsm8k/effective_k"] == f"{s['ek']:.2f} ± {s['ek_std']:.2f}"
    assert (
        shown.loc[2, "ifeval/prompt_level_loose_acc,none"] == "0.770"
        and shown.loc[3, "ifeval/prompt_level_loose_acc,none"] == "-"
    )


def test_decoding_speed_figure_bars(decode_files, monkeypatch):
    files, spec = decode_files
    captured = []
    monkeypatch.setattr(figures, "save_figure", lambda fig, png, pdf: captured.append(fig))
    figures.decoding_speed_figure(load_results(files), "f.png", "f.pdf")
    ax = captured[0].axes[0]
    groups = [f"{r}\n{t}" for t in SETS for r in RUNS]  # several runs: each prompt set's group names its run
    assert [t.get_text() for t in ax.get_xticklabels()] == groups
    bars = {c.get_label(): c for c in ax.containers}
    labels = ["greedy", "hf-greedy", "static-k (k=3)", "conf-adapt (tau=0.9)"]
    assert list(bars) == labels
    # bar_label's annotations point at the top centre of their bar
    notes = {(round(t.xy[0], 6), round(t.xy[1], 6)): t.get_text() for t in ax.texts}
    for label, (dec, _) in zip(labels, DECODERS):
        patches = bars[label].patches
        assert len(patches) == 4
        for p in patches:
            centre = p.get_x() + p.get_width() / 2
            (g,) = [g for g in range(len(groups)) if abs(centre - g) < 0.4]
            s = spec[(*groups[g].split("\n"), dec)]
            assert p.get_height() == pytest.approx(s["tps"]), (label, groups[g])
            assert notes[(round(centre, 6), round(p.get_height(), 6))] == f"{s['tpf']:.2f}", (label, groups[g])
    assert len(notes) == 16


def test_decode_stats_behind_the_columns_by_hand():
    """The statistics every table reads (`results.write.decode_stats`): per-prompt tokens per forward averaged over prompts
    with the sample std (n - 1) and pooled (all tokens over all forwards) with its standard error, effective k inside each answer, new tokens, forward passes, and tokens/s over the
    wall time of the distinct batches (two of the three prompts shared one batch)."""
    from mtp_core.decoding import GenerationResult
    from mtp_core.results.write import decode_stats

    gens = [
        GenerationResult(list(range(6)), [1, 2, 3], 5, 0.5, 1.0, "length"),  # 2 tokens per forward
        GenerationResult(list(range(4)), [1, 1, 2], 5, 0.5, 1.0, "eos"),  # 4/3; the same batch (same times)
        GenerationResult(list(range(5)), [1, 4], 5, 0.2, 0.8, "eos"),  # 2.5; a batch of its own
    ]
    tpf = [2.0, 4 / 3, 2.5]
    mean = sum(tpf) / 3
    s = decode_stats(gens)
    # pooled: 15 tokens over 3 + 3 + 2 forwards; its standard error from the residuals 6 - 15/8 * 3 = 0.375,
    # 4 - 45/8 = -1.625 and 5 - 15/4 = 1.25: sqrt(3/2 * (0.375² + 1.625² + 1.25²)) / 8
    assert s["tokens_per_forward"] == {
        "mean": pytest.approx(mean),
        "std": pytest.approx((sum((x - mean) ** 2 for x in tpf) / 2) ** 0.5),
        "pooled": pytest.approx(1.875),
        "pooled_se": pytest.approx((1.5 * (0.375**2 + 1.625**2 + 1.25**2)) ** 0.5 / 8),
    }
    assert s["effective_k"]["mean"] == pytest.approx(mean)  # without answer lengths: the whole generation
    assert s["new_tokens"] == {"mean": 5.0, "std": 1.0, "total": 15}
    assert s["forward_passes"] == 8 and s["wall_s"] == pytest.approx(2.5) and s["tokens_per_s"] == pytest.approx(6.0)
    # answers of 3, 4 and 1 tokens: the steps whose cumulative count stays within the answer (at least one)
    k = decode_stats(gens, answer_tokens=[3, 4, 1])["effective_k"]
    assert k["mean"] == pytest.approx((1.5 + 4 / 3 + 1.0) / 3)
