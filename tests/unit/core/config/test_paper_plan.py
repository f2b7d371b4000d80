"""The papers' plans over `mtp_core.config.plan.PaperPlan`: typed settings whose defaults live in the schema only,
the registry hooks a plan supplies, the shared name checks and the `results/` layout."""

from __future__ import annotations

import copy
import dataclasses
import json
import types
import typing

import pytest

from mtp_core.config import layout
from mtp_core.config.plan import PaperPlan, typed
from mtp_core.config.registry import papers
from mtp_core.config.settings import ConfigError
from mtp_core.train.launch.methods import resolve
from mtp_core.validation import load_config
from tests.conftest import REPO

from .schemas import schema_defs

PLANS = {name: paper.plan for name, paper in papers().items() if paper.plan is not None}


@pytest.fixture(scope="module")
def tiny() -> dict:
    return load_config(REPO / "config/tiny.yaml")


def _resolve(schema: dict, defs: dict) -> dict:
    ref = schema.get("$ref", "")
    return defs[ref.rsplit("/", 1)[1]] if ref.startswith("#/$defs/") else schema


def _mismatches(cls: type, schema: dict, defs: dict, where: str) -> list[str]:
    """Where dataclass `cls` and the (object) schema disagree: keys, or a field with a default of its own."""
    out, hints = [], typing.get_type_hints(cls)
    props = schema.get("properties") or {}
    fields = {f.name: f for f in dataclasses.fields(cls)}
    if set(fields) != set(props):
        out.append(f"{where}: fields {sorted(fields)} != schema keys {sorted(props)}")
    for name, f in fields.items():
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            out.append(f"{where}.{name}: a default in the dataclass (defaults live in the schema)")
        sub = _resolve(props.get(name) or {}, defs)
        hint = hints[name]
        optional = typing.get_origin(hint) in (typing.Union, types.UnionType)
        for arg in [a for a in typing.get_args(hint) if a is not type(None)] if optional else [hint]:
            if dataclasses.is_dataclass(arg):
                out += _mismatches(arg, sub, defs, f"{where}.{name}")
            elif typing.get_origin(arg) is dict and dataclasses.is_dataclass(value := typing.get_args(arg)[1]):
                # a map of names to one kind: its values' schema, or each of its listed keys'
                extra = sub.get("additionalProperties")
                values = [extra] if isinstance(extra, dict) else sub["properties"].values()
                for v in values:
                    out += _mismatches(value, _resolve(v, defs), defs, f"{where}.{name}")
    return out


@pytest.mark.parametrize("paper", sorted(PLANS))
def test_settings_mirror_the_schema_and_hold_no_default(paper):
    defs = schema_defs(paper)
    assert _mismatches(PLANS[paper].Settings, defs[paper], defs, f"papers.{paper}") == []


@pytest.mark.parametrize("paper", sorted(PLANS))
def test_registry_hooks_come_from_the_plan(paper, tiny):
    registered, plan = papers()[paper], PLANS[paper](tiny)
    assert registered.targets(tiny) == plan.targets() and plan.targets()
    assert [r.label for r in registered.leaderboard(tiny)] == [r.label for r in plan.leaderboard()]
    bad = copy.deepcopy(tiny)
    bad["papers"][paper]["in_all"] = [plan.TABLES[0]]
    assert PLANS[paper](bad).targets() == layout.table_files(paper, plan.TABLES[0])


@pytest.mark.parametrize("paper", sorted(PLANS))
def test_every_plan_answers_the_shared_rules(paper, tiny):
    """What workflow/rules/papers.smk asks of a plan: each table and figure but its own rules' has named input files
    and JSON-ready params; each training a launcher method of its paper, settings and inputs; each named run
    target some files."""
    plan = PLANS[paper](tiny)
    shared = plan.shared_rule_names("table") + plan.shared_rule_names("figure")
    assert sorted(shared + list(plan.OWN_RULES)) == sorted(plan.TABLES + plan.FIGURES)
    for name in shared:
        inputs = plan.report_inputs(name)
        assert inputs and all(isinstance(f, str) for v in inputs.values() for f in ([v] if isinstance(v, str) else v))
        json.dumps(plan.report_params(name))
    methods = {m.name: m for m in papers()[paper].methods}
    assert (plan.TRAIN_METHOD in methods) if plan.TRAIN_METHOD else not methods
    for run in plan.trainings() if plan.TRAIN_METHOD else []:
        assert plan.train_inputs(run) and json.dumps(plan.run_settings(run))
        assert plan.train_record(run).startswith(plan.training_dir(run) + "/")
        resolver = resolve(methods[plan.TRAIN_METHOD].from_config)  # `mtp-repro train --config C --run R`
        assert resolver(tiny, run) == (plan.run_settings(run), plan.launcher_settings(run))
    assert all(plan.run_results(run) for run in plan.run_names())


@dataclasses.dataclass(frozen=True)
class Inner:
    n: int


@dataclasses.dataclass(frozen=True)
class Outer:
    inner: Inner
    names: list[str]


def test_typed_names_the_section_of_a_bad_key():
    assert typed(Outer, {"inner": {"n": 2}, "names": ["a"]}, "papers.px") == Outer(Inner(2), ["a"])
    with pytest.raises(ConfigError, match=r"papers\.px: .*extra"):
        typed(Outer, {"inner": {"n": 2}, "names": [], "extra": 1}, "papers.px")
    with pytest.raises(ConfigError, match=r"papers\.px: .*inner\.n"):
        typed(Outer, {"inner": {"n": "two"}, "names": []}, "papers.px")
    with pytest.raises(ConfigError, match=r"papers\.px: .*names"):
        typed(Outer, {"inner": {"n": 2}}, "papers.px")


def test_check_names_indexes_a_list_and_names_the_declared_ones(tiny):
    plan = PLANS["p3"](tiny)
    plan.check_names("models", ["a", "b"], ["a", "b"], "model", "`models`")
    with pytest.raises(ConfigError, match=r"^papers\.p3\.models\[1\]: model 'c' is not declared in `models` \(a, b\)$"):
        plan.check_names("models", ["a", "c"], ["a", "b"], "model", "`models`")
    with pytest.raises(ConfigError, match=r"^papers\.p3\.prompt_set: prompt set 'x' is not declared in `sets` \(a\)$"):
        plan.check_names("prompt_set", "x", ["a"], "prompt set", "`sets`")


def test_base_plan_paths_follow_the_layout(tiny):
    plan = PLANS["p3"](tiny)
    assert plan.run_dir("r") == "results/models/p3/r"
    assert plan.result_path("m", "prompts-s", "x") == "results/decode/p3/m/prompts-s/x.json"
    assert plan.analysis_dir("m") == "results/analysis/p3/m"
    assert PaperPlan.in_all.__doc__ and plan.in_all() == [*plan.TABLES, *plan.FIGURES]
    assert plan.bench_settings() == {k: tiny["bench"][k] for k in ("warmup", "repeats", "threads")} | dict(
        tiny["papers"]["p3"]["bench"]
    )


def test_layout():
    assert layout.data_split("gsm8k", "test") == "results/data/gsm8k/test.jsonl"
    assert layout.prompts("specbench") == "results/prompts/specbench.jsonl"
    assert layout.decode_result("base", "m", layout.prompts_task("s"), "greedy") == (
        "results/decode/base/m/prompts-s/greedy.json"
    )
    assert layout.table_files("p1", "table2") == ["results/tables/p1/table2.csv", "results/tables/p1/table2.md"]
    assert layout.figure_files("p1", "fig5", root="r") == ["r/figures/p1/fig5.png", "r/figures/p1/fig5.pdf"]
