"""`mtp-repro train --output OUT --method M (--settings S | --config C --run R) [--launcher L] [flags]`: one training
through the submitit launcher, waiting for it and re-attaching after restarts (module docstring of
`mtp_core.train.launch`). Every training rule runs it as `python -m mtp_core.cli train ...`."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from typing import Any

from ..config.settings import deep_merge
from ..io import InputError
from ..train.launch import CLUSTERS, LauncherConfig, interrupt_job, launch
from ..train.launch.methods import get_method, resolve
from ..train.launch.records import say
from ..validation import load_config


def _json_or_file(text: str, what: str) -> dict:
    text = text.strip()
    if text.startswith("{"):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            raise InputError(f"--{what}: invalid JSON: {e}") from None
    else:
        path = Path(text)
        if not path.is_file():
            raise InputError(f"--{what}: {text} is neither a JSON object nor a file")
        import yaml

        value = yaml.safe_load(path.read_text()) if path.suffix in (".yaml", ".yml") else json.loads(path.read_text())
    if not isinstance(value, dict):
        raise InputError(f"--{what}: expected a mapping")
    return value


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def add_commands(sub: Any) -> None:
    p = sub.add_parser(
        "train",
        help="run one training through the submitit launcher",
        description="Submit a training run with submitit (slurm | local | debug), wait, re-attach after restarts; "
        "writes OUTPUT only on success (module docstring of mtp_core.train.launch).",
    )
    p.add_argument("--output", required=True, help="the rule's declared output (a JSON record, written on success)")
    p.add_argument(
        "--method", required=True, help="a registered training method (sft, or a paper's, e.g. p1) or module:attr"
    )
    p.add_argument(
        "--run-dir", help="the run's directory (checkpoints, curves, model); default: the output's directory"
    )
    src = p.add_argument_group("run settings (one of)")
    src.add_argument("--settings", help="the run's settings: a JSON object or a .json/.yaml file")
    src.add_argument("--config", help="a pipeline config file (with --run): the method resolves the run's settings")
    src.add_argument("--run", help="run name in --config")
    la = p.add_argument_group("launcher (config papers.<p>.launcher < runs.<run>.launcher < --launcher < flags)")
    la.add_argument("--launcher", help="launcher settings: a JSON object or a .json/.yaml file")
    la.add_argument("--cluster", choices=CLUSTERS)
    for flag, typ in (
        ("nodes", int),
        ("tasks-per-node", int),
        ("gpus-per-node", int),
        ("cpus-per-task", int),
        ("mem-gb", float),
        ("timeout-min", int),
        ("partition", str),
        ("account", str),
        ("strategy", str),
    ):
        la.add_argument(f"--{flag}", type=typ)
    la.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any launcher key (value parsed as JSON where it parses)",
    )
    p.add_argument("--no-reattach", action="store_true", help="always submit a new job")
    p.add_argument(
        "--interrupt",
        choices=("preempt", "timeout"),
        help="send the running job of OUTPUT a preemption or timeout signal, then exit (tests, drills)",
    )
    p.add_argument("--dry-run", action="store_true", help="print the resolved settings and launcher, submit nothing")
    p.set_defaults(func=cmd_train)


def _settings_and_launcher(args: argparse.Namespace) -> tuple[dict, LauncherConfig]:
    launcher: dict[str, Any] = {}
    if args.config:
        if not args.run:
            raise InputError("--config needs --run")
        config = load_config(args.config)  # validated, defaults filled (as Snakemake does)
        m = get_method(args.method)
        if not m.from_config:
            raise InputError(f"method {args.method!r} cannot read its settings from a config file: use --settings")
        settings, launcher = resolve(m.from_config)(config, args.run)
        if args.settings:
            settings = deep_merge(settings, _json_or_file(args.settings, "settings"))
    elif args.settings:
        settings = _json_or_file(args.settings, "settings")
    else:
        raise InputError("give --settings, or --config and --run")
    if args.launcher:
        launcher = deep_merge(launcher, _json_or_file(args.launcher, "launcher"))
    for flag in (
        "cluster",
        "nodes",
        "tasks_per_node",
        "gpus_per_node",
        "cpus_per_task",
        "mem_gb",
        "timeout_min",
        "partition",
        "account",
        "strategy",
    ):
        if getattr(args, flag) is not None:
            launcher[flag] = getattr(args, flag)
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise InputError(f"--set {item!r}: expected KEY=VALUE")
        launcher[key] = _parse_value(value)
    try:
        return settings, LauncherConfig.from_dict(launcher)
    except (ValueError, TypeError) as e:
        raise InputError(f"bad launcher settings: {e}") from None


def cmd_train(args: argparse.Namespace) -> int:
    if args.interrupt:
        job_id = interrupt_job(args.output, timeout=args.interrupt == "timeout")
        say(f"sent {args.interrupt} signal(s) to job {job_id}")
        return 0
    settings, cfg = _settings_and_launcher(args)
    if args.dry_run:
        print(
            json.dumps({"method": args.method, "settings": settings, "launcher": cfg.as_dict()}, indent=2, default=str)
        )
        return 0

    def stop(signum: int, frame: Any) -> None:
        say(
            f"launcher got {signal.Signals(signum).name}; the job keeps running: rerun the same command "
            "(Snakemake: --unlock, then rerun) to re-attach"
        )
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    try:
        launch(args.output, args.method, settings, cfg, args.run_dir, reattach=not args.no_reattach)
    except ValueError as e:  # the method's check of the settings (before anything is submitted)
        raise InputError(f"bad settings: {e}") from None
    return 0
