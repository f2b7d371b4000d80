"""The vocabulary of a config that every module shares: its error type, a section read into a dataclass, merged
overrides, a model's spec, the bad-row policy of a dataset, the config's hash. Validation (schema, references,
the papers' checks) is `mtp_core.validation`."""

from __future__ import annotations

import copy
import json
import logging
import os
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from urllib.request import url2pathname

import yaml

from ..io import InputError, atomic_write_json, stable_hash

REPO_ROOT = Path(__file__).resolve().parents[3]
SCHEMA_PATH = REPO_ROOT / "workflow" / "schemas" / "config.schema.yaml"


def cache_dir() -> Path:
    """The user's cache directory (the decoder catalog, lm-eval's task index): `$MTP_REPRO_CACHE`, else
    `$XDG_CACHE_HOME/mtp-repro`, else `~/.cache/mtp-repro`."""
    if os.environ.get("MTP_REPRO_CACHE"):
        return Path(os.environ["MTP_REPRO_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mtp-repro"


CACHE_KEEP = 4  # stamps of one kind kept in the cache: a few clones or installs side by side, not every edit


def cached_json(kind: str, stamp: str, build: Callable[[], Any]) -> Any:
    """The JSON value `<kind>-<stamp>.json` in the user's cache, made by `build()` when it is not there (or cannot
    be read); writing one removes the oldest files of that kind beyond the newest `CACHE_KEEP`, so that every code
    or package version does not leave a file behind. A cache that cannot be written is logged and skipped (the
    next call builds again)."""
    root = cache_dir()
    path = root / f"{kind}-{stamp}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    value = build()
    try:
        atomic_write_json(path, value)
        older = sorted(root.glob(f"{kind}-*.json"), key=lambda p: p.stat().st_mtime, reverse=True)[CACHE_KEEP:]
        for old in older:
            old.unlink(missing_ok=True)
    except OSError as e:  # a read-only home
        logging.getLogger(__name__).warning("%s not cached at %s: %s", kind, path, e)
    return value


# Values a config may name that torch modules implement, here so that the checks read them without torch:
LAYER_MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral")  # decoders `layers` runs by hand (full attention checked)
HEAD_CONCAT = ("emb_first", "hidden_first")  # `heads.deepseek`: the order of [embedding; hidden] a head reads
HEAD_INITS = ("copy_last", "normal")  # `DeepSeekMTPHeads.from_trunk`: a copy of the trunk's last layer, or N(0, σ)


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


class ConfigError(InputError):
    """An invalid configuration; the message names the key."""


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


def _schema_yaml(path: str | os.PathLike) -> Any:
    """A schema file read with libyaml where PyYAML has it (about 8x faster than the pure-Python reader: every
    Snakemake process, a cluster job's included, validates the config)."""
    with open(path) as f:
        return yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def validate_schema(config: dict, schema_path: str | os.PathLike = SCHEMA_PATH) -> None:
    """Validate against the JSON schema (draft 2020-12; `$ref`s to the papers' schema files resolved beside it) and
    fill defaults in place, as Snakemake's `validate(..., set_default=True)` does: a property's `default`, when the
    key is absent, before its value is validated (a copy, so that no two configs share a default list)."""
    from jsonschema import Draft202012Validator, ValidationError, validators
    from referencing import Registry, Resource

    path = Path(schema_path).resolve()
    schema = {**_schema_yaml(path), "$id": path.as_uri()}
    registry = Registry(retrieve=lambda uri: Resource.from_contents(_schema_yaml(url2pathname(urlparse(uri).path))))
    validate_properties = Draft202012Validator.VALIDATORS["properties"]

    def properties_with_defaults(validator, properties, instance, subschema):
        if isinstance(instance, dict):
            for key, prop in properties.items():
                if isinstance(prop, dict) and "default" in prop:
                    instance.setdefault(key, copy.deepcopy(prop["default"]))
        yield from validate_properties(validator, properties, instance, subschema)

    validator = validators.extend(Draft202012Validator, {"properties": properties_with_defaults})
    try:
        validator(schema, registry=registry).validate(config)
    except ValidationError as e:
        where = ".".join(map(str, e.absolute_path)) or "the top level"
        raise ConfigError(f"{where}: {e.message} (schema: {path.name})") from None


def read_config(path: str | os.PathLike) -> dict:
    """A config file validated against the schema, defaults filled (no reference checks: `validation.load_config`)."""
    if not Path(path).is_file():
        raise ConfigError(f"{path}: no such config file")
    try:
        with open(path) as f:
            config = yaml.safe_load(f)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    validate_schema(config)
    return config


# The hub mirror (config section `hub_mirror`, the rehearsal's stand-ins for the hub; `mtp_core.data.hub`, `models.hub`):
# one place for where its folders live, read by the rules that write them and the jobs that read them.
HUB_MIRROR_DIR = "results/hub"
HUB_KINDS = ("models", "heads", "datasets", "files")


def hub_mirror_path(kind: str, key: str) -> str:
    """Where the stand-in of hub model / heads / dataset id `key`, or of file `key` (its file name), is written."""
    if kind not in HUB_KINDS:
        raise ValueError(f"hub mirror kind {kind!r} is not one of {', '.join(HUB_KINDS)}")
    return f"{HUB_MIRROR_DIR}/{kind}/{key}"


def hub_task_datasets(config: dict, task: str) -> dict[str, str]:
    """{hub dataset id: stand-in folder} of the mirrored datasets lm-eval task `task` reads (`hub_mirror.datasets.
    <id>.tasks`); empty without a mirror. The evaluation reads them in place of the hub (`evaluate.hub_data`)."""
    datasets = (config.get("hub_mirror") or {}).get("datasets") or {}
    return {i: hub_mirror_path("datasets", i) for i, d in datasets.items() if task in (d.get("tasks") or ())}


def checkpoint_location(spec: dict, base_dir: str | os.PathLike | None) -> tuple[str, dict]:
    """Where `from_pretrained` finds this model, and extra keyword arguments for it."""
    src = spec["source"]
    if src == "hub":
        return spec["id"], {"revision": spec.get("revision")}
    if src == "local":
        return spec["path"], {}
    if base_dir is None:
        raise ValueError(f"model {spec.get('name')!r} ({src}) needs its prepared checkpoint directory")
    return str(base_dir), {}
