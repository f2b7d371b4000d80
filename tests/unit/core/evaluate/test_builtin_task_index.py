"""`builtin_task_index`: the names lm-eval's own task YAMLs declare and the folders that declare them, from one
text scan kept in the user's cache directory. Checked against a scan written here (every YAML file's lines that
start with `task:` or `group:`), and for its cache: written once, read back, remade when a file
of the scanned tree changes."""

from __future__ import annotations

import shutil
from pathlib import Path

import lm_eval.tasks
import pytest

from mtp_core.evaluate import tasks as task_module

STOCK = Path(lm_eval.tasks.__file__).parent
# the built-ins the configs name, a group among them, and a folder's worth of look-alikes (gsm8k's variants)
NAMES = ("gsm8k_cot", "gsm8k", "aime25", "gpqa_main_cot_n_shot", "bbh_cot_fewshot", "ifeval", "cnn_dailymail_abisee",
         "arc_easy", "winogrande")  # fmt: skip


def _declared(text: str) -> set[str]:
    """The names a YAML text declares at its top level: lines that start with `task:` or `group:`, the value
    unquoted (lm-eval's YAMLs write block mappings, so a top-level key starts its line)."""
    out = set()
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key in ("task", "group") and value.strip():
            out.add(value.strip().strip("'\""))
    return out


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MTP_REPRO_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_index_names_the_folders_a_parse_of_every_yaml_finds(cache):
    index = task_module.builtin_task_index()
    declared = {p: _declared(p.read_text(errors="replace")) for p in STOCK.rglob("*.yaml")}
    for name in NAMES:
        folders = sorted({str(p.parent.relative_to(STOCK)) for p, names in declared.items() if name in names})
        assert folders, name  # each is a built-in of this lm-eval
        assert index[name] == folders, name


def test_index_is_cached_and_remade_when_a_file_changes(cache, tmp_path, monkeypatch):
    tree = tmp_path / "tasks"
    shutil.copytree(STOCK / "gsm8k", tree / "gsm8k")
    shutil.copytree(STOCK / "arc", tree / "arc")
    monkeypatch.setattr(lm_eval.tasks, "__file__", str(tree / "__init__.py"))
    first = task_module.builtin_task_index()
    assert first["gsm8k"] == ["gsm8k"] and first["arc_easy"] == ["arc"]
    assert len(list(cache.glob("lm-eval-tasks-*.json"))) == 1

    # read back from the file, not scanned again
    (cached,) = cache.glob("lm-eval-tasks-*.json")
    cached.write_text('{"gsm8k": ["elsewhere"]}')
    assert task_module.builtin_task_index() == {"gsm8k": ["elsewhere"]}

    # a file edited in place (its size and mtime) makes a new stamp, hence a new scan that sees the edit
    edited = tree / "arc" / "arc_easy.yaml"
    edited.write_text(edited.read_text() + "\ngroup: arc_extra\n")
    again = task_module.builtin_task_index()
    assert again["arc_extra"] == ["arc"] and again["gsm8k"] == ["gsm8k"]
    assert len(list(cache.glob("lm-eval-tasks-*.json"))) == 2


def test_folder_is_none_for_a_name_no_folder_or_several_declare(cache, tmp_path, monkeypatch):
    tree = tmp_path / "tasks"
    for folder in ("a", "b"):
        (tree / folder).mkdir(parents=True)
        (tree / folder / "t.yaml").write_text(f"task: shared\ngroup: only_{folder}\n")
    monkeypatch.setattr(lm_eval.tasks, "__file__", str(tree / "__init__.py"))
    task_module.builtin_task_folder.cache_clear()
    try:
        assert task_module.builtin_task_folder("shared") is None
        assert task_module.builtin_task_folder("nowhere") is None
        assert task_module.builtin_task_folder("only_b") == tree / "b"
    finally:
        task_module.builtin_task_folder.cache_clear()
