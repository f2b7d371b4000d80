"""The hub mirror's plan: which stand-ins the config asks for, where they are written, and the config rewrite that
points the paper config's hub ids at them.

`apply(config)` rewrites the validated config in place, once, before anything reads it (`workflow/rules/
common.smk`): a `{source: hub, id: <mirrored model or heads id>}` entry anywhere in the config becomes
`{source: local, path: <stand-in folder>}` (models and published heads are then read by the same
`from_pretrained` / heads import, from a folder); a dataset `path` (a string or a list) naming a mirrored hub
dataset becomes its folder (`datasets.load_dataset` reads a folder with the hub repo's README `configs:` the way it
reads the repo); a `url` naming a mirrored file becomes a `file://` URL of its stand-in (the same download rule
copies it). lm-eval's built-in tasks name their datasets in lm-eval's own YAMLs: the evaluation maps them with
`config.settings.hub_task_datasets` instead. Nothing else changes: strategies, process counts, dtypes and decoders stay the
paper config's.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlparse

from .settings import ConfigError, hub_mirror_path


def section(config: dict) -> dict:
    return config.get("hub_mirror") or {}


def file_key(url: str) -> str:
    """The stand-in file's key under `results/hub/files/`: the URL's host and path."""
    u = urlparse(url)
    return f"{u.netloc}{u.path}"


def outputs(config: dict) -> dict[str, tuple[str, str]]:
    """{stand-in path: (kind, hub id or URL)} of every stand-in the mirror declares."""
    mirror = section(config)
    out: dict[str, tuple[str, str]] = {}
    for kind in ("models", "heads", "datasets"):
        for hub_id in mirror.get(kind) or {}:
            out[hub_mirror_path(kind, hub_id)] = (kind, hub_id)
    for url in mirror.get("files") or {}:
        out[hub_mirror_path("files", file_key(url))] = ("files", url)
    return out


def check(config: dict) -> None:
    """Every heads stand-in drafts for a mirrored model; no id is mirrored both as a model and as heads."""
    mirror = section(config)
    models, heads = mirror.get("models") or {}, mirror.get("heads") or {}
    for hub_id, spec in heads.items():
        if spec["base"] not in models:
            raise ConfigError(f"hub_mirror.heads.{hub_id}.base: {spec['base']!r} is not a key of hub_mirror.models")
    both = sorted(set(models) & set(heads))
    if both:
        raise ConfigError(f"hub_mirror: {both} mirrored both as a model and as heads")


def apply(config: dict) -> dict[str, list[str]]:
    """Point the config's hub references at their stand-ins (module docstring), in place; returns what was
    rewritten, by kind (`{"models": [where, ...], ...}`) for the log."""
    mirror = section(config)
    if not mirror:
        return {}
    local = {i: hub_mirror_path("models", i) for i in mirror.get("models") or {}}
    local |= {i: hub_mirror_path("heads", i) for i in mirror.get("heads") or {}}
    datasets = {i: hub_mirror_path("datasets", i) for i in mirror.get("datasets") or {}}
    files = {u: "file://" + os.path.abspath(hub_mirror_path("files", file_key(u))) for u in mirror.get("files") or {}}
    done: dict[str, list[str]] = {"models": [], "datasets": [], "files": []}

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            if node.get("source") == "hub" and node.get("id") in local:
                node["path"] = local[node.pop("id")]
                node["source"] = "local"
                node.pop("revision", None)
                done["models"].append(where)
            for key, value in node.items():
                here = f"{where}.{key}" if where else str(key)
                if key == "path" and isinstance(value, str) and value in datasets:
                    node[key] = datasets[value]
                    done["datasets"].append(here)
                elif key == "path" and isinstance(value, list) and any(v in datasets for v in value):
                    node[key] = [datasets.get(v, v) for v in value]
                    done["datasets"].append(here)
                elif key == "url" and value in files:
                    node[key] = files[value]
                    done["files"].append(here)
                else:
                    walk(value, here)
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{where}[{i}]")

    for key, value in config.items():
        if key != "hub_mirror":
            walk(value, key)
    return done


def inputs(config: dict, paths: Any) -> list[str]:
    """The stand-ins among `paths` (a path, a `file://` URL, a list of them, or None): rule inputs, so that a rule
    reading a stand-in waits for the rule that writes it."""
    produced = outputs(config)
    items = paths if isinstance(paths, (list, tuple)) else [paths]
    out = []
    for p in items:
        if isinstance(p, str) and p.startswith("file://"):
            p = os.path.relpath(p[len("file://") :])
        if isinstance(p, str) and p in produced:
            out.append(p)
    return out
