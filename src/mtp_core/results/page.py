"""A dated results page of one run: where it ran (date, commit, machine, command, scale), what its jobs cost
(`job_times`) and, given its Snakemake log, how it held its cores (`core_usage`), every table it built (each
table's markdown, verbatim) and the figures beside them. The numbers the docs quote come from such pages, written
from `results/`, never copied by hand.

    python -m mtp_core.results.page --command "make run"      # writes docs/results/<date>-<scale>.md
    python -m mtp_core.results.page --results /tmp/run/results --command "snakemake -c2 all" --out page.md
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import json
import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

from ..io import atomic_write_text
from .core_usage import log_usage
from .job_times import job_times, summary

PAGES = Path("docs/results")  # where `make run` keeps them, one per run


def _natural(path: Path) -> list:
    """table2 before table10."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(path))]


def run_scale(results: Path) -> str:
    """The scale the run's result files record (`scale`); several are joined with '+', none gives 'unknown'."""
    scales = set()
    for path in results.glob("decode/**/*.json"):
        record = json.loads(path.read_text())
        if isinstance(record, dict) and record.get("scale"):
            scales.add(str(record["scale"]))
    return "+".join(sorted(scales)) or "unknown"


def git_commit(repo: Path) -> str:
    """The checkout's short commit, marked when tracked files differ from it; 'unknown' outside git."""
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return f"{head} (with uncommitted changes)" if dirty else head


# the widest vector extension a CPU reports, by its /proc/cpuinfo flag: it decides which kernels torch and inductor
# run (and whether `precision: auto` trains in bf16), so runs on CPUs of one name but different extensions differ
CPU_ISAS = (("amx_bf16", "AMX"), ("avx512_bf16", "AVX-512 BF16"), ("avx512f", "AVX-512"), ("avx2", "AVX2"))


def cpu_isa(flags: set[str]) -> str | None:
    """The widest of `CPU_ISAS` among a CPU's flags, or None."""
    return next((name for flag, name in CPU_ISAS if flag in flags), None)


def _cpuinfo(field: str) -> str | None:
    """The first value of `field` in /proc/cpuinfo, or None (no such file or field)."""
    cpuinfo = Path("/proc/cpuinfo")
    found = re.search(rf"^{field}\s*:\s*(.+)$", cpuinfo.read_text(), re.M) if cpuinfo.is_file() else None
    return found.group(1).strip() if found else None


def cpu_flags() -> set[str]:
    """The CPU's feature flags (empty where /proc/cpuinfo is missing)."""
    return set((_cpuinfo("flags") or "").split())


def cpu_name() -> str:
    """The CPU's model name with its widest vector extension (`cpu_isa`), e.g. 'AMD EPYC (AVX2)'."""
    name = _cpuinfo("model name") or platform.processor() or platform.machine()
    isa = cpu_isa(cpu_flags())
    return f"{name} ({isa})" if isa else name


def machine() -> str:
    """CPU model (`cpu_name`) and logical CPUs, memory, GPUs (nvidia-smi), Python and torch versions."""
    cpu = cpu_name()
    try:
        ram = f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB"
    except (ValueError, OSError, AttributeError):
        ram = "memory unknown"
    gpus = "no GPU"
    if shutil.which("nvidia-smi"):
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.strip().splitlines()
        gpus = "; ".join(listed) or gpus
    try:
        torch = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch = "none"
    return f"{cpu}, {os.cpu_count()} logical CPUs, {ram}, {gpus}; Python {platform.python_version()}, torch {torch}"


def _cost(results: Path) -> list[str]:
    if not (results / "benchmarks").is_dir():
        return ["No benchmark files: the run's jobs were not timed."]
    table = summary(job_times(results), "group")
    return [
        "Wall and CPU minutes of every job with a `benchmark:` file, summed per group "
        "(`benchmarks/job_times.py --results <results>`; tables and figures have none):",
        "",
        table.to_markdown(),
    ]


def _cores(log: Path) -> list[str]:
    cores, stretches, use = log_usage(log)
    worst = stretches[stretches["free"] > 0].nlargest(5, "free_core_min")
    return [
        f"How the run held its cores, from its Snakemake log (`benchmarks/job_times.py --log`): {use['elapsed_min']:.1f}"
        f" min on {cores} cores, {use['core_min']:.1f} core-minutes, of which the jobs' declared threads held "
        f"{use['held_core_min']:.1f} and {use['free_core_min']:.1f} were free."
        + (" The longest stretches with a free core:" if len(worst) else ""),
        "",
        *([worst[["start_min", "min", "free", "jobs"]].round(1).to_markdown(index=False)] if len(worst) else []),
    ]


def results_page(
    results: Path,
    command: str,
    *,
    date: str,
    commit: str,
    where: str,
    scale: str,
    note: str = "",
    log: Path | None = None,
) -> str:
    """The page's markdown (module docstring); `scale`: `run_scale(results)`; `note`: a line on how the run went
    (elapsed time, load); `log`: the run's Snakemake log (a local run), for how it held its cores."""
    lines = [
        f"# Results of a run at {scale} scale, {date}",
        "",
        "Written from the run's `results/` by `python -m mtp_core.results.page`; every number below is one",
        "of its files.",
        "",
        "| | |",
        "|---|---|",
        f"| command | `{command}` |",
        f"| commit | {commit} |",
        f"| machine | {where} |",
        f"| scale | {scale} |",
        f"| results | `{results}` |",
        *([f"| note | {note} |"] if note else []),
        "",
        "## What the jobs cost",
        "",
        *_cost(results),
        "",
        *([*_cores(log), ""] if log else []),
        "## Tables",
    ]
    tables = sorted((results / "tables").glob("**/*.md"), key=_natural)
    if not tables:
        lines += ["", "The run built no table."]
    group = None
    for path in tables:
        rel = path.relative_to(results / "tables")
        if rel.parts[0] != group:
            group = rel.parts[0]
            lines += ["", f"### {group}"]
        lines += ["", f"#### {rel.with_suffix('')}", "", path.read_text().strip()]
    figures = sorted((results / "figures").glob("**/*.png"), key=_natural)
    lines += ["", "## Figures", ""]
    lines += [f"- `{p.relative_to(results.parent) if p.is_relative_to(results.parent) else p}`" for p in figures]
    lines += [] if figures else ["The run drew no figure."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", type=Path, default=Path("results"), help="the run's results directory")
    ap.add_argument("--command", required=True, help="the command that produced the run, as typed")
    ap.add_argument("--out", type=Path, default=PAGES, help="a .md file, or a folder for <date>-<scale>.md")
    ap.add_argument("--note", default="", help="a line on how the run went, e.g. its elapsed time and the load")
    ap.add_argument("--log", type=Path, help="the run's Snakemake log (.snakemake/log/): how it held its cores")
    args = ap.parse_args(argv)
    if not args.results.is_dir():
        ap.error(f"--results {args.results}: no such directory")
    date, scale = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d"), run_scale(args.results)
    commit, where = git_commit(Path.cwd()), machine()
    page = results_page(
        args.results, args.command, date=date, commit=commit, where=where, scale=scale, note=args.note, log=args.log
    )
    out = args.out if args.out.suffix == ".md" else args.out / f"{date}-{scale}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, page)
    print(out)
    return out


if __name__ == "__main__":
    main()
