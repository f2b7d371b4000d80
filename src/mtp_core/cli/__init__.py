"""`mtp-repro` (or `python -m mtp_core.cli`): the project's command line, the top layer of the core.

Subcommands: `bench` (decoders side by side, the bench protocol), `generate` (one generation step by step), `train`
(a training through the submitit launcher: what every training rule runs), and those each paper registers
(`Paper.commands` in `config.registry`; paper 5's `tree-search` and `import-heads`: its tree search, throughput
frontier and scheduler bank for given heads on any prompt file, and published heads in the format it reads). The
command line imports no paper module but those. Bad input (a file and its row, a config key, an unknown decoder,
model or parameter) is printed as one line, `mtp-repro <command>: error: ...`, with exit status 2; a failed training
job exits 1 with its job's error (module docstring of `mtp_core.train.launch`).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from ..config import registry
from ..io import InputError
from ..train.launch import LaunchError
from . import decode, train


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mtp-repro", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    decode.add_commands(sub)
    train.add_commands(sub)
    for paper in registry.papers().values():
        for module in paper.commands:
            importlib.import_module(module).add_commands(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except InputError as e:
        print(f"mtp-repro {args.command}: error: {e}", file=sys.stderr)
        return 2
    except LaunchError as e:
        print(f"mtp-repro {args.command}: {e}", file=sys.stderr)
        return 1
