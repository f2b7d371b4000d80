"""config/README.md is generated from the schema (`mtp_core.config.schema_doc`) and current; the schema's descriptions are
whole (a comma inside an unquoted flow-mapping description splits it into a stray key)."""

from __future__ import annotations

import yaml

from mtp_core.config import schema_doc
from mtp_core.config.settings import SCHEMA_PATH


def test_config_readme_is_current():
    assert schema_doc.main(["--check"]) == 0, "run `python -m mtp_core.config.schema_doc`"


def test_every_key_of_every_section_is_listed_with_its_default_and_description():
    text = schema_doc.render()
    assert (
        "| `papers.p5.tasks.<name>.calib` | integer |  | prompts the search, throughput and τ are chosen on |" in text
    )
    assert "| `seed` | integer | `0` | global seed (data generation, sampling of prompt sets) |" in text
    assert "| `papers.p4.method.encoding_layers` | integer | `0` |" in text
    for section in (
        "models",
        "datasets",
        "launcher",
        "leaderboard",
        "hub_mirror",
        *(f"papers.p{i}" for i in range(1, 6)),
    ):
        assert f"## `{section}`" in text, section


def _stray_keys(node, path=()):
    if isinstance(node, dict):
        for key, value in node.items():
            if value is None and isinstance(key, str) and (" " in key or ")" in key):
                yield ".".join((*path, key))
            yield from _stray_keys(value, (*path, str(key)))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _stray_keys(value, (*path, str(i)))


def test_no_description_is_cut_at_a_comma():
    for schema in sorted(SCHEMA_PATH.parent.glob("*.schema.yaml")):
        assert not list(_stray_keys(yaml.safe_load(schema.read_text()))), schema.name
