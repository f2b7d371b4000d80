"""`mtp-repro` (or `python -m mtp_core.cli`): the project's command line, the top layer over papers and core.

Subcommands: `bench` (decoders side by side, the bench protocol), `generate` (one generation step by step),
`train` (a training through the submitit launcher: what every training rule runs), `tree-search` (paper 5's tree
search, throughput frontier and scheduler bank for given heads on any prompt file). Bad input (a file and its row,
a config key, an unknown decoder, model or parameter) is printed as one line, `mtp-repro <command>: error: ...`,
with exit status 2; a failed training job exits 1 with its job's error (module docstring of
`mtp_core.train.launch`).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from ..io import InputError
from ..train.launch import LaunchError
from . import decode, train, tree_search


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mtp-repro", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    decode.add_commands(sub)
    train.add_commands(sub)
    tree_search.add_commands(sub)
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
