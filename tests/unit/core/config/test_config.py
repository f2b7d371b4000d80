"""Config validation: the three shipped configs pass; wrong types, unknown scales, missing model/data
entries and unknown decoders fail with a message naming the key; defaults are filled."""

from __future__ import annotations

import copy

import pytest
import yaml

from mtp_core.config.settings import ConfigError, config_hash
from mtp_core.validation import load_config, validate_config
from tests.conftest import REPO

CONFIGS = ["config.yaml", "config/tiny.yaml", "config/paper.yaml"]


@pytest.fixture(scope="module")
def tiny_raw():
    return yaml.safe_load((REPO / "config/tiny.yaml").read_text())


@pytest.mark.parametrize("path", CONFIGS)
def test_shipped_configs_validate(path):
    cfg = load_config(REPO / path)
    assert cfg["scale"] in ("tiny", "embedded", "paper")
    assert all("enabled" in p for p in cfg["papers"].values())


@pytest.mark.parametrize("path", CONFIGS)
def test_trainings_that_cannot_launch_stop_before_any_job(path):
    """Every training of a shipped config (fine-tunes, paper runs) is checked with its launcher's world size: a
    process count that does not divide the global batch into whole micro-batches is a config error, not a crash at
    launch (the paper-scale runs once asked 8 processes for 4 micro-batches)."""
    raw = yaml.safe_load((REPO / path).read_text())
    raw["launcher"] = {**(raw.get("launcher") or {}), "tasks_per_node": 7}
    for paper in raw["papers"].values():  # a paper's own launcher section would override the top level
        paper.pop("launcher", None)
        for run in (paper.get("runs") or {}).values():
            if isinstance(run, dict):
                run.pop("launcher", None)
    with pytest.raises(ConfigError, match=r"tasks_per_node 7"):
        validate_config(raw)


def test_defaults_are_filled(tiny_raw):
    cfg = validate_config(copy.deepcopy(tiny_raw))
    assert cfg["evaluation"]["bootstrap_iters"] == 1000
    assert cfg["models"]["tiny-llama"]["max_position_embeddings"] == 2048
    assert cfg["datasets"]["math"]["augmentations"]["fobar"] == 1
    assert cfg["datasets"]["pretrain"]["shard_tokens"] == 8000


@pytest.mark.parametrize(
    "files", [["config.yaml"], ["config/tiny.yaml"], ["config/paper.yaml", "config/rehearsal.yaml"]]
)
def test_defaults_equal_snakemakes_own_validate(files):
    """`validate_schema` (libyaml, the Snakefile's) fills the config exactly as `snakemake.utils.validate` does."""
    from snakemake.utils import validate

    from mtp_core.config.settings import SCHEMA_PATH, deep_merge, validate_schema

    raw: dict = {}
    for f in files:
        raw = deep_merge(raw, yaml.safe_load((REPO / f).read_text()))
    ours, theirs = copy.deepcopy(raw), copy.deepcopy(raw)
    validate_schema(ours)
    validate(theirs, str(SCHEMA_PATH), set_default=True)
    assert ours == theirs and ours != raw


def test_schema_error_is_one_line_naming_the_path(tiny_raw):
    from mtp_core.config.settings import validate_schema

    with pytest.raises(ConfigError) as e:
        validate_schema(bad(tiny_raw, lambda c: c["papers"]["p2"].update(reference_extra_tokens="x")))
    assert str(e.value) == "papers.p2.reference_extra_tokens: 'x' is not of type 'integer' (schema: config.schema.yaml)"


def bad(raw, mutate):
    cfg = copy.deepcopy(raw)
    mutate(cfg)
    return cfg


@pytest.mark.parametrize(
    "mutate, key",
    [
        (lambda c: c.update(scale="huge"), "scale"),
        (lambda c: c.update(threads="two"), "threads"),
        (lambda c: c["decoding"].update(max_new_tokens=1.5), "max_new_tokens"),
        (lambda c: c["models"]["tiny-llama"].update(arch="gpt2"), "arch"),
        (lambda c: c["models"]["tiny-llama"].update(hiden_size=3), "hiden_size"),
        (lambda c: c["models"].update(m={"source": "hub"}), "id"),
        (lambda c: c["datasets"]["math"].update(validation_fraction=1.5), "validation_fraction"),
        (lambda c: c.pop("evaluation"), "evaluation"),
        (lambda c: c["papers"].update(p1={}), "enabled"),
        (lambda c: c.update(unknown_section=1), "unknown_section"),
        (lambda c: c.update(launcher={"clutser": "slurm"}), "clutser"),
        (lambda c: c.update(launcher={"cluster": "auto"}), "auto"),
        (lambda c: c["papers"]["p1"].update(launcher={"tasks_per_node": 0}), "tasks_per_node"),
        (lambda c: c["prompt_sets"]["specbench"].pop("dataset"), "dataset"),
    ],
)
def test_schema_errors_name_the_key(tiny_raw, mutate, key):
    with pytest.raises(ConfigError, match=key):
        validate_config(bad(tiny_raw, mutate))


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda c: c["decoding"].update(model="nope"), r"decoding\.model: model 'nope'"),
        (lambda c: c["evaluation"].update(model="nope"), r"evaluation\.model: model 'nope'"),
        (lambda c: c["decoding"].update(prompt_sets=["math", "nope"]), r"decoding\.prompt_sets\[1\]"),
        (lambda c: c["datasets"]["pretrain"].update(tokenizer="nope"), r"datasets\.pretrain\.tokenizer"),
        (lambda c: c["prompt_sets"]["math"].update(dataset="nope"), r"prompt_sets\.math\.dataset"),
        (lambda c: c["prompt_sets"]["math"].update(dataset="humaneval"), r"not a math dataset"),
        (lambda c: c["prompt_sets"]["specbench"].update(dataset="nope"), r"prompt_sets\.specbench\.dataset"),
        (lambda c: c["prompt_sets"]["specbench"].update(dataset="humaneval"), r"specbench\.dataset: .*not a math"),
        (lambda c: c["datasets"].pop("sharegpt"), r"needs a dataset of kind 'sharegpt'"),
        (lambda c: c["evaluation"]["decoders"].update(nope={}), r"evaluation\.decoders\.nope: unknown decoder 'nope'"),
        (
            lambda c: (
                c["datasets"].pop("math")
                and c["prompt_sets"].pop("math")
                and c["prompt_sets"].pop("specbench")
                and c["decoding"].update(prompt_sets=["code"])
            ),
            r"evaluation\.tasks\[0\]",
        ),
        (
            lambda c: c["papers"]["p1"]["runs"]["main"].update(launcher={"strategy": "none", "tasks_per_node": 2}),
            r"papers\.p1\.runs\.main\.launcher: .*strategy",
        ),
    ],
)
def test_reference_errors_name_the_key(tiny_raw, mutate, message):
    with pytest.raises(ConfigError, match=message):
        validate_config(bad(tiny_raw, mutate))


def test_config_hash_is_stable_and_sensitive(tiny_raw):
    a = validate_config(copy.deepcopy(tiny_raw))
    b = validate_config(copy.deepcopy(tiny_raw))
    assert config_hash(a) == config_hash(b)
    b["seed"] = 1
    assert config_hash(a) != config_hash(b)
