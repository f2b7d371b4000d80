"""Every command block of the README and docs/ runs as written, in a form that costs seconds: Snakemake command
lines as dry runs from the repository root (`-n`, in a temporary `--directory`, with the block's `export`s; a
`--report` line without its report, which needs a finished run), make
targets as `make -n`, `mtp-repro` lines through the CLI's own parser, and every Python block's imports. A flag,
target, rule, config file or name that the code no longer has fails here."""

from __future__ import annotations

import ast
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mtp_core.cli import build_parser

from ..conftest import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)


def blocks(lang: str) -> list[tuple[str, str]]:
    """(file:line, body) of every fenced block of this language."""
    out = []
    for path in DOCS:
        text = path.read_text()
        for m in FENCE.finditer(text):
            if m.group(1) == lang:
                out.append((f"{path.relative_to(REPO)}:{text[: m.start()].count(chr(10)) + 1}", m.group(2)))
    return out


def command_lines(body: str) -> tuple[dict[str, str], list[list[str]]]:
    """The block's exported variables and its commands (continuations joined, comments dropped)."""
    env, commands = {}, []
    for line in body.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if not words:
            continue
        if words[0] == "export":
            env |= dict(w.split("=", 1) for w in words[1:])
        else:
            commands.append(words)
    return env, commands


COMMANDS = [(f"{where}#{i}", env, words) for where, body in blocks("bash") for env, cmds in [command_lines(body)]
            for i, words in enumerate(cmds)]  # fmt: skip


def test_the_docs_have_command_blocks():
    programs = {Path(words[0]).name for _, _, words in COMMANDS}
    assert {"make", "snakemake", "mtp-repro"} <= programs, programs
    assert blocks("python")


@pytest.mark.parametrize(("where", "env", "words"), COMMANDS, ids=[c[0] for c in COMMANDS])
def test_command_block_runs(where, env, words, tmp_path):
    program, args = Path(words[0]).name, words[1:]
    if program == "mtp-repro":
        build_parser().parse_args(args)  # exits (SystemExit) on an unknown subcommand, flag or choice
        return
    if program == "make":
        cmd = ["make", "-n", *args]
    elif program == "snakemake":  # in a fresh work directory that has the default config, as a checkout does
        shutil.copy(REPO / "config.yaml", tmp_path)
        if "--report" in args:  # a report needs a finished run (the tiny `all` fixture writes one): plan the rest
            i = args.index("--report")
            args = args[:i] + args[i + 2 :]
        cmd = [sys.executable, "-m", "snakemake", *args, "-n", "--directory", str(tmp_path)]
    else:
        pytest.fail(f"{where}: no rule to run {program!r} cheaply; teach this test")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("MTP_SLURM", "SNAKEMAKE_PROFILE"))}
    proc = subprocess.run(cmd, cwd=REPO, env={**base, "HF_HUB_OFFLINE": "1", **env}, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, f"{where}: {' '.join(cmd)}\n{(proc.stdout + proc.stderr)[-4000:]}"


@pytest.mark.parametrize(("where", "body"), blocks("python"), ids=[b[0] for b in blocks("python")])
def test_python_block_imports(where, body):
    imports = [node for node in ast.parse(body).body if isinstance(node, ast.Import | ast.ImportFrom)]
    assert imports, where
    exec(compile(ast.Module(body=imports, type_ignores=[]), where, "exec"), {})
