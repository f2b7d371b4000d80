"""Local lm-eval tasks over the pipeline's own data, and the task manager that finds them.

Local tasks are YAML templates shipped in this package; lm-eval needs absolute `data_files` paths, so
`write_task_yaml` copies a template into a working directory with the absolute path of the data filled in, and
beside it the helper modules its `!function`s name (lm-eval loads them by file path, next to the YAML). Every
other task name is an lm-eval built-in (e.g. `gsm8k_cot` at paper scale) and passes through. A local task may
take a built-in's name (`coqa`, whose stock helpers cannot import under transformers 5): its task manager sees
only the local YAML. A built-in's task manager indexes only the folder of lm-eval's tasks that declares it
(`builtin_task_folder`): lm-eval's whole index parses ~14,000 YAML files, about 14 s in every evaluation. Which
folder declares a name comes from one text scan of those files, kept in the user's cache directory
(`builtin_task_index`).

Task -> data: `synthetic_math_cot` reads the test split (`results/data/<dataset>/test.jsonl`) of the first
dataset of kind `synthetic_math` declared in the config (`task_dataset`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from ...config import layout
from ...config.settings import cached_json, hub_task_datasets
from ...io import read_jsonl, require_text_fields

TEMPLATE_DIR = Path(__file__).parent
DATA_PLACEHOLDER = "__TEST_JSONL__"
LM_EVAL_TASKS_PLACEHOLDER = "__LM_EVAL_TASKS__"  # lm-eval's own task directory (a local task may extend a stock one)


@dataclass(frozen=True)
class LocalTask:
    template: str  # file in TEMPLATE_DIR
    dataset_kind: str | None  # `kind` of the config dataset whose test split the task reads; None: hub data
    fields: tuple[str, ...] = ()  # row fields the prompt and target use
    includes: tuple[str, ...] = ()  # other templates the YAML includes (materialised beside it)
    modules: tuple[str, ...] = ()  # helper modules in TEMPLATE_DIR its `!function`s load (copied beside it)


LOCAL_TASKS: dict[str, LocalTask] = {
    "synthetic_math_cot": LocalTask("synthetic_math_cot.yaml", "synthetic_math", ("query", "answer")),
    # paper 1's GSM8K variant (its lm-eval fork): stock 8-shot `gsm8k_cot` with "A: Let's think step by step."
    "gsm8k_cot_singleshot": LocalTask("gsm8k_cot_singleshot.yaml", None),
    # paper 4's generative multiple-choice tasks (think mode, chain of thought; hub data)
    "arc_easy_dmtd": LocalTask("arc_easy_dmtd.yaml", None),
    "arc_challenge_dmtd": LocalTask("arc_challenge_dmtd.yaml", None, includes=("arc_easy_dmtd.yaml",)),
    "winogrande_dmtd": LocalTask("winogrande_dmtd.yaml", None),
    # paper 4's CoQA: lm-eval 0.4.13's `coqa` re-implemented (`coqa.py`); the stock helpers need transformers < 5
    "coqa": LocalTask("coqa.yaml", None, modules=("coqa.py",)),
}


def is_local_task(task: str) -> bool:
    return task in LOCAL_TASKS


def task_dataset(config: dict, task: str) -> str | None:
    """The config dataset whose test split local `task` reads (the first declared dataset of the task's
    kind); None for lm-eval built-in tasks and local tasks on hub data, which bring their own data."""
    if not is_local_task(task) or LOCAL_TASKS[task].dataset_kind is None:
        return None
    kind = LOCAL_TASKS[task].dataset_kind
    for name, ds in config["datasets"].items():
        if ds["kind"] == kind:
            return name
    raise ValueError(f"evaluation.tasks: task {task!r} needs a dataset of kind {kind!r} in `datasets`")


def task_inputs(config: dict, task: str, key: str = "data") -> dict[str, str | list[str]]:
    """What evaluating `task` reads from the workflow: a local task's test split (`{key: split}`) and the hub
    stand-ins of its datasets (`{f"{key}_hub": [...]}`, the rehearsal)."""
    inputs: dict[str, str | list[str]] = {}
    dataset = task_dataset(config, task)
    if dataset is not None:
        inputs[key] = layout.data_split(dataset, "test")
    hub = list(hub_task_datasets(config, task).values())
    if hub:
        inputs[f"{key}_hub"] = hub
    return inputs


def check_task_data(task: str, test_path: str | os.PathLike) -> int:
    """Validate the data of local `task` (cheap; run it before loading a model); returns the row count.

    Raises `io.BadRowError` naming file and row for a row without the fields the task uses.
    """
    rows = sum(1 for _ in read_jsonl(test_path, validate=require_text_fields(*LOCAL_TASKS[task].fields)))
    if rows == 0:
        raise ValueError(f"{test_path}: no rows for task {task!r}")
    return rows


def write_task_yaml(task: str, test_path: str | os.PathLike | None, out_dir: str | os.PathLike) -> Path:
    """Materialise the template of local `task` into `out_dir` with the absolute path of its test split (tasks
    on local data) and of lm-eval's own task directory (tasks that extend a stock one), its helper modules
    beside it."""
    if not is_local_task(task):
        raise KeyError(f"{task!r} is not a local task (local: {', '.join(sorted(LOCAL_TASKS))})")
    import lm_eval.tasks

    out = Path(out_dir) / LOCAL_TASKS[task].template
    out.parent.mkdir(parents=True, exist_ok=True)
    for name in (*LOCAL_TASKS[task].includes, LOCAL_TASKS[task].template):
        text = (TEMPLATE_DIR / name).read_text()
        text = text.replace(LM_EVAL_TASKS_PLACEHOLDER, str(Path(lm_eval.tasks.__file__).parent))
        if test_path is not None:
            text = text.replace(DATA_PLACEHOLDER, json.dumps(str(Path(test_path).resolve())))
        (out.parent / name).write_text(text)
    for name in LOCAL_TASKS[task].modules:
        shutil.copyfile(TEMPLATE_DIR / name, out.parent / name)
    return out


def task_manager_for(task: str, test_path: str | os.PathLike | None = None, out_dir: str | os.PathLike | None = None):
    """A `TaskManager` that resolves `task`: for a local task, one that sees only its materialised YAML in
    `out_dir` (which must outlive the evaluation); for a built-in, lm-eval's default index."""
    from lm_eval.tasks import TaskManager

    if not is_local_task(task):
        folder = builtin_task_folder(task)
        if folder is not None:
            narrow = TaskManager(include_path=str(folder), include_defaults=False)
            if task in narrow.all_tasks:
                return narrow
        return TaskManager()
    reads_data = LOCAL_TASKS[task].dataset_kind is not None
    if out_dir is None or (reads_data and test_path is None):
        raise ValueError(
            f"local task {task!r} needs {'its test split and ' if reads_data else ''}a directory for its YAML"
        )
    if reads_data:
        check_task_data(task, test_path)
    write_task_yaml(task, test_path, out_dir)
    return TaskManager(include_path=str(out_dir), include_defaults=False)


@functools.cache
def builtin_task_folder(task: str) -> Path | None:
    """The folder of lm-eval's own tasks whose YAML files declare `task: <task>` or `group: <task>`
    (`builtin_task_index`); None when none does or several folders do (the caller then indexes every built-in task).
    The tasks a group lists live beside its YAML (tests/unit/core/evaluate/test_hub_tasks.py checks the configs'
    built-ins)."""
    import lm_eval.tasks

    folders = builtin_task_index().get(task, [])
    return Path(lm_eval.tasks.__file__).parent / folders[0] if len(folders) == 1 else None


_DECLARES = re.compile(r"^(?:task|group):\s*['\"]?(.+?)['\"]?\s*$", re.M)


def builtin_task_index() -> dict[str, list[str]]:
    """Every name a YAML file of lm-eval's own tasks declares at its top level (`task: <name>` or `group: <name>`)
    -> the folders (relative to `lm_eval/tasks`) that declare it. One text scan of the ~14,000 files (about 3 s of
    CPU) is kept in the user's cache directory under a stamp of the installed files (path, size, mtime), so that an
    evaluation job reads a JSON file instead, and an edited or upgraded lm-eval makes a new one."""
    import lm_eval.tasks

    root = Path(lm_eval.tasks.__file__).parent
    files = sorted(root.rglob("*.yaml"))
    digest = hashlib.sha256(str(root).encode())
    for path in files:
        st = path.stat()
        digest.update(f"\0{path.relative_to(root)}\0{st.st_size}\0{st.st_mtime_ns}".encode())

    def scan() -> dict[str, list[str]]:
        index: dict[str, set[str]] = {}
        for path in files:
            for name in _DECLARES.findall(path.read_text(errors="replace")):
                index.setdefault(name, set()).add(str(path.parent.relative_to(root)))
        return {name: sorted(folders) for name, folders in index.items()}

    return cached_json("lm-eval-tasks", digest.hexdigest()[:20], scan)
