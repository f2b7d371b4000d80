"""The library's settings dataclasses that a config section feeds (their fields are the section's keys) have the
defaults the schema fills in: a key left out of the config and a caller of the library get the same value."""

from __future__ import annotations

import dataclasses

import pytest

from mtp_core.papers.p1.settings import P1Config
from mtp_core.papers.p2.settings import P2Config, P2LossConfig
from mtp_core.papers.p4.settings import DMTDConfig
from mtp_core.train.config import TrainConfig

from .schemas import schema_defs

# (schema file, path of the object schema under $defs, the dataclass it feeds)
SECTIONS = [
    ("config", "train", TrainConfig),
    ("p1", "p1_method", P1Config),
    ("p2", "p2_method", P2Config),
    ("p2", "p2_method.loss", P2LossConfig),
    ("p4", "p4_method", DMTDConfig),
]


def _object_schema(schema_file: str, path: str) -> dict:
    node = schema_defs(schema_file)
    first, *rest = path.split(".")
    node = node[first]
    for key in rest:
        node = node["properties"][key]
    return node["properties"]


def _plain(value):
    return list(value) if isinstance(value, tuple) else value


@pytest.mark.parametrize(("schema_file", "path", "cls"), SECTIONS, ids=[f"{s}:{p}" for s, p, _ in SECTIONS])
def test_schema_defaults_equal_the_dataclass_defaults(schema_file, path, cls):
    props = _object_schema(schema_file, path)
    checked, differ = 0, []
    for field in dataclasses.fields(cls):
        if field.name not in props or "default" not in props[field.name]:
            continue
        if field.default is not dataclasses.MISSING:
            ours = field.default
        elif field.default_factory is not dataclasses.MISSING:
            ours = field.default_factory()
        else:
            continue
        if dataclasses.is_dataclass(ours):  # a nested section: its own entry above
            continue
        checked += 1
        if _plain(ours) != props[field.name]["default"]:
            differ.append(f"{field.name}: schema {props[field.name]['default']!r}, {cls.__name__} {ours!r}")
    assert checked >= 3, f"{cls.__name__}: only {checked} defaults compared (is the schema path right?)"
    assert not differ, differ
