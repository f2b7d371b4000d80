"""Config validation, before any job: the JSON schema with its defaults (the same call Snakemake makes), then what
a schema cannot express: every name used in one section (a model, a dataset, a prompt set, a decoder, a task) is
declared in another, fine-tuned models build, and every enabled paper's own check (`mtp_core.config.registry`) passes.
Each error names the offending key.
"""

from __future__ import annotations

import os

from .bench.leaderboard import plan as leaderboard
from .config import hub_mirror, registry
from .config.settings import ConfigError, read_config, validate_schema
from .data.prompts import MATH_TEST_SOURCES
from .data.sources import SourceError, check_sources
from .decoding.catalog import check_decoder
from .evaluate.tasks import is_local_task, task_dataset
from .io import InputError
from .models.plan import check as check_scratch_models
from .train.finetune import check as check_finetuned_models


def check_references(config: dict) -> None:
    """Every name used in a section is declared (`models`, `datasets`, `prompt_sets`, registered decoders, local
    tasks' datasets), scratch and fine-tuned models build (`models.plan.check`, `train.finetune.check`), and every enabled paper passes its check."""
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
            if ds["source"] == "rows":
                _check_rows_source(name, ds, datasets)
    for name, ps in prompt_sets.items():
        if ps["source"] in MATH_TEST_SOURCES:
            need("dataset", datasets, ps["dataset"], f"prompt_sets.{name}.dataset")
            if datasets[ps["dataset"]]["kind"] not in ("synthetic_math", "metamathqa"):
                raise ConfigError(f"prompt_sets.{name}.dataset: {ps['dataset']!r} is not a math dataset")
    for source in ("sharegpt", "humaneval"):
        users = [n for n, ps in prompt_sets.items() if ps["source"] in (source, "specbench")]
        if users and not any(ds["kind"] == source for ds in datasets.values()):
            raise ConfigError(f"prompt_sets.{users[0]}: needs a dataset of kind {source!r} in `datasets`")
    for i, task in enumerate(config["evaluation"]["tasks"]):
        if is_local_task(task):
            try:
                task_dataset(config, task)
            except ValueError as e:
                raise ConfigError(f"evaluation.tasks[{i}]: {e}") from None
    for section in ("decoding", "evaluation"):
        for label, params in config[section]["decoders"].items():
            try:
                check_decoder(label, params)
            except InputError as e:
                raise ConfigError(f"{section}.decoders.{label}: {e}") from None
    try:
        check_sources(config)  # local data files and folders: their loaders' row check on the first record
    except SourceError as e:
        raise ConfigError(str(e)) from None
    check_scratch_models(config)  # scratch models: their tokenizers
    check_finetuned_models(config)  # fine-tuned models: base, dataset, training settings
    papers = registry.papers()
    for name, section in (config.get("papers") or {}).items():
        if (section or {}).get("enabled") and name not in papers:
            raise ConfigError(
                f"papers.{name}: enabled, but no paper {name!r} is registered (registered: {', '.join(papers)})"
            )
    for paper in registry.enabled_papers(config):
        paper.check(config)
    leaderboard.check(config)  # last: the papers' rows are built from their checked sections


def _check_rows_source(name: str, ds: dict, datasets: dict) -> None:
    """A pretrain_text dataset of source rows names a dataset with train rows (validation: a math dataset)."""
    from .data.rows import MATH_KINDS, TRAIN_DATA_KINDS

    key = f"datasets.{name}.dataset"
    if ds.get("dataset") not in datasets:
        raise ConfigError(f"{key}: source rows needs a declared dataset, got {ds.get('dataset')!r}")
    kinds = MATH_KINDS if ds.get("split", "train") == "validation" else TRAIN_DATA_KINDS
    if datasets[ds["dataset"]]["kind"] not in kinds:
        raise ConfigError(
            f"{key}: {ds['dataset']!r} has no {ds.get('split', 'train')} rows (kinds: {', '.join(kinds)})"
        )


def apply_hub_mirror(config: dict) -> None:
    """Check the config's hub mirror and point its hub references at the stand-ins (`config.hub_mirror.apply`), in
    place, before anything reads them; no mirror: nothing changes."""
    hub_mirror.check(config)
    hub_mirror.apply(config)


def validate_config(config: dict) -> dict:
    """Schema (with defaults), the hub mirror, then references; returns the same dict for chaining."""
    validate_schema(config)
    apply_hub_mirror(config)
    check_references(config)
    return config


def load_config(path: str | os.PathLike) -> dict:
    """A config file, schema-validated with defaults, its hub mirror applied, and reference-checked."""
    config = read_config(path)
    apply_hub_mirror(config)
    check_references(config)
    return config
