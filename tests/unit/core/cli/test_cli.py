"""The command line (`mtp-repro`, `mtp_core.cli`): bench and generate on a prepared tiny model, and bad input as one
clear line with a non-zero exit (file and row of a bad prompt file, an unknown decoder or parameter, a model that
is not declared or not prepared, a missing config), checked before any model is loaded."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mtp_core.cli import main
from mtp_core.cli.decode import decoder_params
from mtp_core.io import InputError
from tests.conftest import REPO

TINY = str(REPO / "config/tiny.yaml")
ROWS = [{"id": "a", "category": "x", "prompt": "hello there"}, {"id": "b", "category": "y", "prompt": "what is 2 + 2"}]


@pytest.fixture()
def prepared_tiny(tmp_path, tiny_llama):
    """A results dir with the tiny config's tiny-llama prepared as Snakemake would, and a prompt file."""
    d = tmp_path / "results/models/base/tiny-llama"
    tiny_llama.model.save_pretrained(d)
    tiny_llama.tokenizer.save_pretrained(d)
    (tmp_path / "p.jsonl").write_text("\n".join(json.dumps(r) for r in ROWS) + "\n")
    return tmp_path


def test_decoder_params_from_config_and_overrides():
    cfg = {"decoding": {"decoders": {"greedy": {"prune_finished": True}}}}
    got = decoder_params(["greedy", "prompt-lookup"], cfg, ["greedy.prune_finished=false", "prompt-lookup.num_draft=5"])
    assert got == {"greedy": {"prune_finished": False}, "prompt-lookup": {"num_draft": 5}}
    with pytest.raises(InputError, match="expected DECODER.KEY=VALUE"):
        decoder_params(["greedy"], cfg, ["other.k=1"])
    with pytest.raises(InputError, match=r"unknown parameter\(s\) x \(accepted: .*num_draft"):
        decoder_params(["prompt-lookup"], cfg, ["prompt-lookup.x=1"])


def test_cli_bench_and_generate(prepared_tiny, capsys):
    out = prepared_tiny / "bench.json"
    assert (
        main(
            [
                "bench",
                "--config",
                TINY,
                "--model",
                "tiny-llama",
                "--results",
                str(prepared_tiny / "results"),
                "--prompts",
                str(prepared_tiny / "p.jsonl"),
                "--decoders",
                "greedy,hf-greedy",
                "--n",
                "2",
                "--max-new-tokens",
                "6",
                "--batch-size",
                "2",
                "--repeats",
                "1",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "| greedy |" in printed and "| hf-greedy |" in printed
    summary = json.loads(out.read_text())
    assert summary["n_prompts"] == 2 and summary["decoders"]["hf-greedy"]["identical_to_greedy"] is True
    assert (
        main(
            [
                "generate",
                "--config",
                TINY,
                "--model",
                "tiny-llama",
                "--results",
                str(prepared_tiny / "results"),
                "--prompt",
                "hi",
                "--max-new-tokens",
                "5",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "step    0  +1" in printed and "tokens/forward" in printed


def _bench(results, prompts, *extra):
    return [
        "bench",
        "--config",
        TINY,
        "--model",
        "tiny-llama",
        "--results",
        str(results),
        "--prompts",
        str(prompts),
        "--max-new-tokens",
        "4",
        "--repeats",
        "1",
        *extra,
    ]


@pytest.mark.parametrize("case", ["bad_row", "empty", "no_file", "decoder", "param", "model", "unprepared", "config"])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, case):
    """Each bad input stops before a model is loaded (nothing is prepared here), with one line naming it."""
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps(ROWS[0]) + "\n")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(ROWS[0]) + "\n" + '{"id": "b", "prompt": 3}\n')
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    argv, expected = {
        "bad_row": (_bench(tmp_path, bad), f"{bad}: row 2"),
        "empty": (_bench(tmp_path, empty), f"{empty}: no prompt rows"),
        "no_file": (_bench(tmp_path, tmp_path / "nope.jsonl"), "no prompt file"),
        "decoder": (_bench(tmp_path, good, "--decoders", "greedy,nope"), "unknown decoder 'nope' (registered: "),
        "param": (
            _bench(tmp_path, good, "--param", "greedy.k=2"),
            "greedy: unknown parameter(s) k (accepted: backend, prune_finished)",
        ),
        "model": (["generate", "--config", TINY, "--model", "nope", "--prompt", "hi"], "model 'nope' is not declared"),
        "unprepared": (_bench(tmp_path, good), "model 'tiny-llama' is not prepared yet"),
        "config": (
            ["generate", "--config", str(tmp_path / "none.yaml"), "--model", "x", "--prompt", "hi"],
            "no such config file",
        ),
    }[case]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"mtp-repro {argv[0]}: error: ") and expected in err[0], err


def test_console_script_prints_no_traceback(tmp_path):
    """The installed entry point itself (a subprocess): exit status 2 and one line, no traceback."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    proc = subprocess.run(
        [sys.executable, "-m", "mtp_core.cli", *_bench(tmp_path, bad)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and f"{bad}: row 1" in proc.stderr, proc.stderr
