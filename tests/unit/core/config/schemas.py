"""The workflow's JSON schemas as the config tests read them."""

from __future__ import annotations

import yaml

from tests.conftest import REPO


def schema_defs(name: str) -> dict:
    """The `$defs` of `workflow/schemas/<name>.schema.yaml` (`config` or a paper's name)."""
    return yaml.safe_load((REPO / f"workflow/schemas/{name}.schema.yaml").read_text())["$defs"]
