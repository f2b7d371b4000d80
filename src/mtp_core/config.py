"""Configuration: schema validation with defaults (the same call Snakemake makes) and reference checks.

The schema lives in `workflow/schemas/config.schema.yaml`; JSON schema cannot check that a name used in one
section (a model, a dataset, a prompt set) is declared in another, so `check_references` does that and names
the offending key.
"""

from __future__ import annotations

import copy
from dataclasses import fields
import os
from pathlib import Path
from typing import Any

import yaml

from .io import stable_hash

REPO_ROOT = Path(__file__).resolve().parents[2]
SCHEMA_PATH = REPO_ROOT / "workflow" / "schemas" / "config.schema.yaml"


def section_keys(cls: type, d: dict | None, section: str) -> dict[str, Any]:
    """Config section `d` as keyword arguments of dataclass `cls`; unknown keys are a ValueError naming
    `section`, them and the known ones."""
    d = dict(d or {})
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ValueError(f"{section}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    return d


def deep_merge(base: dict, over: dict | None) -> dict:
    """`base` with `over` merged in key by key (nested dicts merged, everything else replaced); copies."""
    out = copy.deepcopy(base)
    for k, v in (over or {}).items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


class ConfigError(ValueError):
    """An invalid configuration; the message names the key."""


def validate_schema(config: dict, schema_path: str | os.PathLike = SCHEMA_PATH) -> None:
    """Validate against the JSON schema and fill defaults in place (Snakemake's own `validate`)."""
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    try:
        validate(config, str(schema_path), set_default=True)
    except WorkflowError as e:
        raise ConfigError(str(e)) from None


def check_references(config: dict) -> None:
    """Every name used in a section must be declared in `models`, `datasets` or `prompt_sets`."""
    models, datasets, prompt_sets = config["models"], config["datasets"], config["prompt_sets"]

    def need(kind: str, table: dict, name: str, key: str) -> None:
        if name not in table:
            raise ConfigError(f"{key}: {kind} {name!r} is not declared (declared: {', '.join(sorted(table))})")

    for section in ("decoding", "evaluation"):
        need("model", models, config[section]["model"], f"{section}.model")
    for i, name in enumerate(config["decoding"]["prompt_sets"]):
        need("prompt set", prompt_sets, name, f"decoding.prompt_sets[{i}]")
    for name, ds in datasets.items():
        if ds["kind"] == "pretrain_text":
            need("model", models, ds["tokenizer"], f"datasets.{name}.tokenizer")
    for name, ps in prompt_sets.items():
        if ps["source"] == "math":
            need("dataset", datasets, ps["dataset"], f"prompt_sets.{name}.dataset")
            if datasets[ps["dataset"]]["kind"] not in ("synthetic_math", "metamathqa"):
                raise ConfigError(f"prompt_sets.{name}.dataset: {ps['dataset']!r} is not a math dataset")
    for source in ("sharegpt", "humaneval"):
        users = [n for n, ps in prompt_sets.items() if ps["source"] in (source, "specbench")]
        if users and not any(ds["kind"] == source for ds in datasets.values()):
            raise ConfigError(f"prompt_sets.{users[0]}: needs a dataset of kind {source!r} in `datasets`")
    from .evaluate.tasks import is_local_task, task_dataset

    for i, task in enumerate(config["evaluation"]["tasks"]):
        if is_local_task(task):
            try:
                task_dataset(config, task)
            except ValueError as e:
                raise ConfigError(f"evaluation.tasks[{i}]: {e}") from None
    from .decoding import DECODERS, registry_name

    for section in ("decoding", "evaluation"):
        for label, params in config[section]["decoders"].items():
            name = registry_name(label, params)
            if name not in DECODERS:
                raise ConfigError(
                    f"{section}.decoders.{label}: unknown decoder {name!r} "
                    f"(registered: {', '.join(sorted(DECODERS))})"
                )
    from .model_plan import check as check_models  # fine-tuned models: base, dataset, training settings

    check_models(config)
    from .p1_plan import check as check_p1  # paper 1's runs, tables and figures (a no-op when disabled)

    check_p1(config)
    from .p3_plan import check as check_p3  # paper 3's methods, tables and figures (a no-op when disabled)

    check_p3(config)


def validate_config(config: dict) -> dict:
    """Schema (with defaults) then references; returns the same dict for chaining."""
    validate_schema(config)
    check_references(config)
    return config


def load_config(path: str | os.PathLike) -> dict:
    with open(path) as f:
        config = yaml.safe_load(f)
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return validate_config(config)


def config_hash(config: dict) -> str:
    """Short stable hash of the validated configuration, recorded in every result file."""
    return stable_hash(config)


def dataset_on_bad_row(config: dict, name: str) -> str:
    """What reading dataset `name` does with a bad row: its own `on_bad_row`, else the config's (error | skip)."""
    return config["datasets"][name].get("on_bad_row", config.get("on_bad_row", "error"))


def model_spec(config: dict, name: str) -> dict[str, Any]:
    """The declared spec of model `name` with its name attached."""
    if name not in config["models"]:
        raise ConfigError(f"model {name!r} is not declared in `models`")
    spec = copy.deepcopy(config["models"][name])
    spec["name"] = name
    return spec
