"""`mtp-repro tree-search` and `import-heads`: defaults from the config's papers.p5 (the paper's budgets and regime
with config/paper.yaml), every flag honoured or refused by name, help for every flag, and end to end on the tiny
world with both engines, each writing a bank the `entmtp` decoder of its regime loads."""

from __future__ import annotations

import argparse
import json

import pytest

from mtp_core.cli import build_parser, main
from mtp_core.decoding import StopCriteria, build_decoder
from mtp_core.io import InputError, atomic_write_jsonl
from mtp_core.papers.p5.cli import search_settings
from mtp_core.validation import load_config
from tests.conftest import REPO
from tests.unit.papers.p5.p5_world import world


def args_of(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(
        ["tree-search", "--model", "m", "--heads", "h", "--prompts", "p", "--out", "o", *argv]
    )


def test_defaults_follow_the_config():
    paper = load_config(REPO / "config/paper.yaml")
    s, job = search_settings(paper, args_of("--config", "config/paper.yaml"))
    assert (s.budgets, s.depths, s.tolerance, s.frontier_mode) == ((16, 32, 64), (1, 2, 3, 4), 0.4, "per-depth")
    assert job["engine"] == "rollout" and job["max_rows"] == 90 and job["calibration"]["max_new_tokens"] == 256
    assert job["decode"] == {
        "acceptance": "typical",
        "temperature": 0.7,
        "posterior_threshold": 0.09,
        "posterior_alpha": 0.3,
    }
    assert job["max_prompt_tokens"] == 1400 and len(s.taus) == 12
    embedded = load_config(REPO / "config.yaml")
    s, job = search_settings(embedded, args_of())
    assert s.budgets == (4, 8, 16, 32, 64) and s.include_greedy and job["engine"] == "offline" and job["decode"] == {}


def test_flags_are_honoured_or_refused():
    cfg = load_config(REPO / "config.yaml")
    s, job = search_settings(
        cfg,
        args_of(
            "--temperature",
            "0.8",
            "--posterior-alpha",
            "0.2",
            "--depths",
            "1",
            "2",
            "--budgets",
            "4",
            "--tolerance",
            "0.5",
            "--max-children",
            "3",
            "--frontier-mode",
            "global",
            "--candidate-mode",
            "all",
            "--max-new-tokens",
            "9",
            "--batch-size",
            "2",
            "--max-prompt-tokens",
            "50",
            "--reps",
            "1",
            "--threads",
            "1",
            "--taus",
            "0.1",
            "--hysteresis",
            "1.0",
            "--score-feature",
            "path_value_greedy_depth2",
            "--no-include-greedy",
        ),
    )
    assert (
        job["engine"] == "rollout" and job["decode"]["temperature"] == 0.8 and job["decode"]["posterior_alpha"] == 0.2
    )
    assert (s.depths, s.budgets, s.tolerance, s.max_children_per_parent) == ((1, 2), (4,), 0.5, 3)
    assert (s.frontier_mode, s.candidate_mode, s.taus, s.hysteresis, s.price_reps) == (
        "global",
        "all",
        (0.1,),
        (1.0,),
        1,
    )
    assert s.score_feature == "path_value_greedy_depth2" and not s.include_greedy
    assert job["calibration"] == {"max_new_tokens": 9, "batch_size": 2} and job["max_prompt_tokens"] == 50
    assert job["threads"] == 1 and job["max_rows"] == 64  # the default tree's 63 nodes + the root row
    for argv, message in (
        (("--engine", "offline", "--temperature", "0.7"), "--engine offline with --temperature 0.7"),
        (("--max-rows", "64"), "--max-rows 64: .* needs 90 rows"),
        (("--posterior-threshold", "0.1"), "typical acceptance only"),
        (("--frontier-mode", "global", "--score-feature", "entropy"), "score feature 'entropy'"),
        (("--temperature", "-1"), "must be >= 0"),
        (("--max-children", "11"), "max_children_per_parent 11: 1 .. 10"),
    ):
        with pytest.raises(InputError, match=message):
            search_settings(cfg, args_of(*argv))


def test_every_flag_has_help():
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name in ("tree-search", "import-heads"):
        for action in sub.choices[name]._actions:
            assert action.help and action.help != argparse.SUPPRESS, (name, action.dest)


@pytest.mark.parametrize("temperature", ["0", "0.7"], ids=["offline", "rollout"])
def test_tree_search_end_to_end(tmp_path, temperature, capsys):
    w = world()
    prompts = tmp_path / "prompts.jsonl"
    atomic_write_jsonl(prompts, [{"prompt": w.loaded.tokenizer.decode(p)} for p in w.prompts[:3]])
    out = tmp_path / "out"
    argv = [
        "tree-search", "--config", str(REPO / "config/tiny.yaml"), "--model", "tiny-llama", "--checkpoint",
        str(w.root / "model"), "--heads", str(w.heads["hydra"]), "--prompts", str(prompts), "--out", str(out),
        "--depths", "1", "2", "--budgets", "2", "--max-new-tokens", "8", "--reps", "1", "--taus", "0.05",
        "--hysteresis", "1.0", "--score-feature", "path_value_greedy_depth2", "--temperature", temperature,
    ]  # fmt: skip
    assert main(argv) == 0
    bank = json.loads((out / "bank.json").read_text())
    engine = "offline" if temperature == "0" else "rollout"
    assert f"{engine} engine" in capsys.readouterr().out and bank["engine"] == engine
    assert {f.name for f in out.iterdir()} >= {
        "search.json",
        "self.json",
        "throughput.json",
        "table.npz",
        "regimes.csv",
    }
    regime = {} if temperature == "0" else {"acceptance": "typical", "temperature": 0.7}
    dec = build_decoder(
        "entmtp", w.loaded.model, w.loaded.tokenizer, heads=w.heads["hydra"], bank=str(out / "bank.json"), **regime
    )
    assert dec.generate(w.prompts[:1], 6, StopCriteria())[0].tokens
    assert main([*argv[:-2], "--engine", "offline", "--temperature", "0.7"]) == 2  # refused with a message
