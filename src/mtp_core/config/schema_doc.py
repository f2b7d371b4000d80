"""config/README.md, generated from the config schema (`workflow/schemas/config.schema.yaml` and the papers'
`pN.schema.yaml`): one table per top-level section and per paper, every key with its type, default and
description, so that the schema stays the one place for each default.

    python -m mtp_core.config.schema_doc            # rewrite config/README.md
    python -m mtp_core.config.schema_doc --check    # exit 1 when config/README.md is not current (a test runs it)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from .settings import REPO_ROOT, SCHEMA_PATH

README = REPO_ROOT / "config" / "README.md"
HEADER = """# Configuration reference

Generated from the config schema by `python -m mtp_core.config.schema_doc` (a test checks it is current): do not edit by
hand. One config file chooses the scale: `config.yaml` (embedded, the default), `config/tiny.yaml`,
`config/paper.yaml`; two files apply over one of them: `config/rehearsal.yaml` over the paper config (sizes only)
and `config/embedded-p2-full.yaml` over the embedded one (paper 2's seed replicates and App. D's uncached speed
protocol, which the embedded `all` leaves out for its time budget). Snakemake validates a config against the
schema and fills in its defaults before any job runs; the plan checks that follow stop it with a message naming the
key. `<name>` stands for a key of the user's choice (a model, a run, a decoder label).
"""


class _Schemas:
    """The schema files, with `$ref`s resolved across them (`file.yaml#/$defs/x` or `#/$defs/x`)."""

    def __init__(self, root: Path):
        self.dir = root.parent
        self.files: dict[str, dict] = {}

    def load(self, name: str) -> dict:
        if name not in self.files:
            self.files[name] = yaml.safe_load((self.dir / name).read_text())
        return self.files[name]

    def resolve(self, node: dict, here: str) -> tuple[dict, str]:
        while isinstance(node, dict) and "$ref" in node:
            target, _, pointer = node["$ref"].partition("#")
            here = target or here
            node = self.load(here)
            for part in pointer.strip("/").split("/") if pointer else []:
                node = node[part]
        return node, here


def _type(node: dict) -> str:
    if "enum" in node:
        return " \\| ".join(f"`{v}`" for v in node["enum"])
    t = node.get("type")
    if isinstance(t, list):
        return " \\| ".join(t)
    if t == "array" and isinstance(node.get("items"), dict) and node["items"].get("type"):
        return f"list of {node['items']['type']}"
    if t is None and "allOf" in node:
        return "object"
    if t is None and ("oneOf" in node or "anyOf" in node):
        return " \\| ".join(str(o.get("type", "object")) for o in node.get("oneOf") or node.get("anyOf"))
    return str(t or "")


def _cell(text: Any) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _default(node: dict) -> str:
    return _cell(f"`{json.dumps(node['default'])}`") if "default" in node else ""


def _properties(schemas: _Schemas, node: dict, here: str) -> dict[str, tuple[dict, str]]:
    """A node's keys, each resolved with the file it resolves in. Under `allOf` (a paper's own defaults listed
    before the foundation's section) the members' keys merge, and an earlier member's fields win, as they do when
    the schema fills in defaults."""
    props = {key: schemas.resolve(child, here) for key, child in (node.get("properties") or {}).items()}
    for member in reversed(node.get("allOf") or []):
        member, member_here = schemas.resolve(member, here)
        for key, (child, child_here) in _properties(schemas, member, member_here).items():
            base, base_here = props.get(key, ({}, child_here))
            props[key] = ({**base, **child}, base_here)
    return props


def _rows(schemas: _Schemas, node: dict, here: str, path: str, depth: int = 0) -> list[str]:
    node, here = schemas.resolve(node, here)
    rows = []
    extra = node.get("additionalProperties")
    for key, (child_r, child_here) in _properties(schemas, node, here).items():
        full = f"{path}.{key}" if path else key
        rows.append(f"| `{full}` | {_type(child_r)} | {_default(child_r)} | {_cell(child_r.get('description', ''))} |")
        if depth < 4:
            rows += _rows(schemas, child_r, child_here, full, depth + 1)
    if isinstance(extra, dict) and depth < 4:
        extra_r, extra_here = schemas.resolve(extra, here)
        if extra_r.get("properties") or extra_r.get("description"):
            full = f"{path}.<name>" if path else "<name>"
            rows.append(f"| `{full}` | {_type(extra_r)} |  | {_cell(extra_r.get('description', ''))} |")
            rows += _rows(schemas, extra_r, extra_here, full, depth + 1)
    return rows


def render(schema_path: Path = SCHEMA_PATH) -> str:
    """The reference page: the header, the top-level keys, then one table per section (each paper its own)."""
    schemas = _Schemas(schema_path)
    root = schemas.load(schema_path.name)
    head = "| key | type | default | description |\n|---|---|---|---|"
    top, sections = [], []
    for key, node in root["properties"].items():
        resolved, here = schemas.resolve(node, schema_path.name)
        if key == "papers":
            for paper, pnode in resolved["properties"].items():
                pres, phere = schemas.resolve(pnode, here)
                sections.append((f"papers.{paper}", pres, phere))
        elif resolved.get("properties") or isinstance(resolved.get("additionalProperties"), dict):
            sections.append((key, resolved, here))
        else:
            top.append(
                f"| `{key}` | {_type(resolved)} | {_default(resolved)} | {_cell(resolved.get('description', ''))} |"
            )
    out = [HEADER, f"## Top level\n\n{head}\n" + "\n".join(top) + "\n"]
    for path, node, here in sections:
        rows = _rows(schemas, node, here, path)
        about = _cell(node.get("description", ""))
        out.append(f"## `{path}`\n\n" + (f"{about}\n\n" if about else "") + f"{head}\n" + "\n".join(rows) + "\n")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write config/README.md from the config schema.")
    parser.add_argument("--check", action="store_true", help="exit 1 when config/README.md is not current")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = README.is_file() and README.read_text() == text
        if not current:
            print("config/README.md is not current: run `python -m mtp_core.config.schema_doc`", file=sys.stderr)
        return 0 if current else 1
    README.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
