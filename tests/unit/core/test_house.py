"""The house rules (issue "A house for five papers"): the import-linter contracts (cli > papers > core, papers
independent of each other, no import cycle in mtp_core), ruff's lint and format, no module over ~500 lines, and
the paper registry that lets the core use papers it never imports."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mtp_core.config import registry
from mtp_core.config.registry import Paper
from mtp_core.config.settings import ConfigError
from mtp_core.decoding import decoders
from mtp_core.train.launch.methods import get_method, methods
from mtp_core.validation import load_config
from tests.conftest import REPO

BIN = Path(sys.executable).parent
LINTED = ["src", "tests", "workflow/scripts", "benchmarks"]
MAX_LINES = 500


def _run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)


def test_import_contracts_hold():
    proc = _run(str(BIN / "lint-imports"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "Contracts: 3 kept, 0 broken" in proc.stdout


def test_ruff_lint_is_clean():
    proc = _run(str(BIN / "ruff"), "check", *LINTED)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_ruff_format_is_applied():
    proc = _run(str(BIN / "ruff"), "format", "--check", *LINTED)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_no_module_over_500_lines():
    big = {
        str(p.relative_to(REPO)): n
        for d in LINTED
        for p in sorted((REPO / d).rglob("*.py"))
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not big, f"split these by job: {big}"


def test_registry_loads_every_paper_package():
    papers = registry.papers()
    packaged = sorted(p.name for p in (REPO / "src/mtp_core/papers").iterdir() if (p / "__init__.py").is_file())
    assert list(papers) == packaged == ["p1", "p2", "p3", "p4", "p5"]
    for name, paper in papers.items():
        assert paper.name == name and paper.title
        for module in paper.decoders:  # each names a module that registers at least one decoder
            assert any(cls.__module__ == module for cls in decoders().values()), (name, module)
        for m in paper.methods:
            assert get_method(m.name) is m
    assert {"sft", "p1"} <= set(methods())
    assert {"static-k", "conf-adapt", "probing", "greedy", "prompt-lookup", "lookahead", "stand"} <= set(decoders())


def test_a_paper_registers_once():
    p1 = registry.papers()["p1"]
    assert registry.register_paper(p1) is p1  # the same object again: a no-op
    with pytest.raises(ValueError, match="registered twice"):
        registry.register_paper(Paper("p1", "another paper 1", plan=lambda c: None))
    with pytest.raises(ValueError, match="p<number>"):
        Paper("paper1", "x", plan=lambda c: None)


def test_an_enabled_paper_must_be_registered(monkeypatch):
    """A config enabling a paper whose package is not installed (here: p5 hidden from the registry) stops."""
    known = registry.papers()
    monkeypatch.setattr(registry, "papers", lambda: {k: v for k, v in known.items() if k != "p5"})
    with pytest.raises(
        ConfigError, match=r"papers.p5: enabled, but no paper 'p5' is registered \(registered: p1, p2, p3, p4\)"
    ):
        load_config(REPO / "config/tiny.yaml")


def test_the_core_imports_no_paper():
    """Importing every core module leaves the papers unloaded until the registry is asked (entry points)."""
    src = REPO / "src"
    core = sorted(
        ".".join(p.relative_to(src).with_suffix("").parts).removesuffix(".__init__")
        for p in (src / "mtp_core").rglob("*.py")
        if p.relative_to(src / "mtp_core").parts[0] not in ("papers", "cli") and p.stem != "__main__"
    )
    code = (
        "import importlib, sys\n"
        f"for name in {core!r}:\n"
        "    importlib.import_module(name)\n"
        "print(sorted(n for n in sys.modules if n.startswith('mtp_core.papers')))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(core) > 50 and proc.stdout.strip() == "[]"


def test_tables_and_figures_load_without_torch():
    """Loading the papers' packages and the modules that write the core's, every paper's and the leaderboard's
    tables and figures imports no torch (decoders are registered on the first question, `decoding.decoders()`):
    those Snakemake jobs start in ~1 s, not ~7."""
    modules = [
        "mtp_core.papers.p1",
        "mtp_core.papers.p2",
        "mtp_core.papers.p3",
        "mtp_core.papers.p4",
        "mtp_core.papers.p5",
        "mtp_core.results.write",
        "mtp_core.results",
        "mtp_core.bench.leaderboard.table",
        "mtp_core.papers.p1.report",
        "mtp_core.papers.p2.report",
        "mtp_core.papers.p2.figures",
        "mtp_core.papers.p3.report",
        "mtp_core.papers.p4.report",
        "mtp_core.papers.p5.report",
        *[f"mtp_core.papers.p{i}.figures" for i in (1, 3, 4, 5)],
    ]
    code = (
        f"import importlib, sys\nfor m in {modules!r}:\n    importlib.import_module(m)\nprint('torch' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "False"


def test_tables_load_without_matplotlib():
    """The modules of the table jobs (the foundation's and every paper's) import no matplotlib: each paper keeps its
    figures in `figures`, beside its tables in `report`, so that a table job starts without the plotting library
    (about 1 s of CPU a job)."""
    modules = [
        "mtp_core.results.build",
        "mtp_core.results.tables",
        *[f"mtp_core.papers.p{i}.report" for i in range(1, 6)],
    ]
    code = (
        f"import importlib, sys\nfor m in {modules!r}:\n    importlib.import_module(m)\n"
        "print('matplotlib' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "False"


def test_training_method_checks_load_without_torch():
    """Every registered training method's settings check (`registry.Method.check`, which the workflow's plan checks
    run on every Snakemake parse) resolves without importing torch: the config classes it validates and its
    `MethodSettings` live in torch-free modules, the entry beside the training code."""
    code = (
        "import sys\n"
        "from mtp_core.train.launch.methods import methods, resolve\n"
        "for m in methods().values():\n"
        "    resolve(m.check)\n"
        "print(sorted(methods()), 'torch' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("] False"), proc.stdout


def test_plan_checks_load_without_torch(tmp_path):
    """`validation.load_config` (the schema, every paper's `check`, the methods' and decoders' checks: what each
    Snakemake parse runs) imports no torch on the shipped configs, once the decoder catalog's cache is filled (a
    first call in another process fills it; that one may import torch)."""
    configs = [str(REPO / c) for c in ("config/tiny.yaml", "config.yaml", "config/paper.yaml")]
    code = (
        "import sys\n"
        "from mtp_core.validation import load_config\n"
        "for c in sys.argv[1:]:\n"
        "    load_config(c)\n"
        "print('torch' in sys.modules)\n"
    )
    env = {**os.environ, "MTP_REPRO_CACHE": str(tmp_path)}
    for expect in (None, "False"):  # the first call fills the cache
        proc = subprocess.run(
            [sys.executable, "-c", code, *configs], capture_output=True, text=True, timeout=300, cwd=REPO, env=env
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert expect is None or proc.stdout.strip() == expect, proc.stdout


def test_nothing_refers_to_files_outside_the_repository():
    """A user's clone has no design notes or paper texts beside it: no tracked file names them or cites their
    sections and item tags (the patterns are built here so that this file does not match them)."""
    notes = ["_official_code", "transformers_notes", "transformers_layers_and_heads", "_spec", "_anchors"]
    notes += ["lm_eval_notes", "gpu_measurements", "snakemake_slurm_submitit"]
    patterns = [r"\.\./" + "shared", "DESIGN" + r"\.md", r"\bpapers/0[1-5]_\w+\." + "txt"]
    patterns += [r"\bgotcha G" + r"\d", r"\breference " + "§", r"\breference G" + r"\d", r"\bspec " + "§"]
    patterns += [r"\bspec A" + r"\d", *(name + r"\." + "md" for name in notes)]
    outside = re.compile("|".join(patterns))
    tracked = subprocess.run(["git", "-C", str(REPO), "ls-files"], capture_output=True, text=True, check=True)
    hits = []
    for name in tracked.stdout.splitlines():
        path = REPO / name
        if path.suffix in {".py", ".md", ".smk", ".yaml", ".yml", ".toml", ".txt", ".sh", ".cfg", ".json"} or name in {
            "Snakefile", "Makefile"}:  # fmt: skip
            text = path.read_text(errors="replace") if path.is_file() else ""
            hits += [f"{name}: {m.group(0)}" for m in outside.finditer(text)]
    assert not hits, hits


def test_scripts_import_only_what_the_library_has():
    """The benchmarks, which no test runs, and the workflow's scripts import from `mtp_core` only modules and names
    that exist: a module moved or a function renamed fails here, not on the next measurement."""
    import ast
    import importlib.util

    missing = []
    for path in sorted([*(REPO / "benchmarks").glob("*.py"), *(REPO / "workflow/scripts").glob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mtp_core"):
                module = importlib.import_module(node.module)
                missing += [f"{path.name}: {node.module}.{a.name}" for a in node.names if not hasattr(module, a.name)
                            and importlib.util.find_spec(f"{node.module}.{a.name}") is None]  # fmt: skip
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("mtp_core") and importlib.util.find_spec(a.name) is None:
                        missing.append(f"{path.name}: {a.name}")
    assert not missing, missing
