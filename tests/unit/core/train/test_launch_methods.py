"""`launch.methods.MethodSettings` and `TrainingMethod`: a method's check and entry made from what is its own (its
section and config, its hooks; its train function); the shared settings check runs for every method made."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from mtp_core.config.settings import section_keys
from mtp_core.train.launch.methods import MethodSettings, TrainingMethod, check_settings, get_method, resolve

TRAIN = {"max_steps": 1}


@dataclass(frozen=True)
class ToyConfig:
    width: int = 1

    @classmethod
    def from_dict(cls, d: dict | None) -> ToyConfig:
        return cls(**section_keys(cls, d, "toy"))


def _record(*args: Any, **kwargs: Any) -> dict:
    return {"args": args, "kwargs": kwargs}


def _loaded(settings: dict) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return ("model", settings["data"]), {"seed": settings.get("seed", 0)}


TOY_SETTINGS = MethodSettings("toy", "toy", ToyConfig.from_dict, keys=("seed",))
TOY = TrainingMethod(TOY_SETTINGS, _record, load=_loaded)


@pytest.fixture
def settings(tmp_path: Path) -> dict:
    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps({"query": "q", "response": "r"}) + "\n")
    return {"model": {"source": "tiny", "name": "toy"}, "data": str(data), "train": TRAIN, "toy": {"width": 2}}


def test_the_shared_check_runs_for_a_made_method(settings, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"toy settings: unknown setting\(s\) bogus \(known: .*base_dir.*seed"):
        TOY_SETTINGS.check({**settings, "bogus": 1})
    with pytest.raises(ValueError, match="toy settings.data: nope.jsonl does not exist"):
        TOY_SETTINGS.check({**settings, "data": "nope.jsonl"})
    with pytest.raises(ValueError, match="toy settings: 'train' is required"):
        TOY_SETTINGS.check({k: v for k, v in settings.items() if k != "train"})
    with pytest.raises(ValueError, match="toy: unknown key"):
        TOY_SETTINGS.check({**settings, "toy": {"height": 1}})
    assert TOY_SETTINGS.check({**settings, "data": "train.jsonl"})["data"] == str(tmp_path / "train.jsonl")


def test_hooks_run_around_the_shared_check_in_order(settings):
    calls: list[str] = []

    def prepare(s: dict) -> dict:
        calls.append("prepare")
        return {**s, "train": {**s["train"], "lr": 0.5}}

    def shared(s: dict, allowed: tuple[str, ...], *, what: str) -> dict:
        calls.append(f"check {what} {sorted(allowed)}")
        return check_settings(s, allowed, required=("toy",), paths=("data",), what=what)

    def finish(s: dict) -> dict:
        calls.append("finish")
        return {**s, "done": True}

    method = MethodSettings(
        "toy",
        "toy",
        ToyConfig.from_dict,
        keys=("data", "model", "train"),
        settings_check=shared,
        prepare=prepare,
        finish=finish,
    )
    out = method.check(settings)
    assert calls == ["prepare", "check toy settings ['data', 'model', 'toy', 'train']", "finish"]
    assert out["train"]["lr"] == 0.5 and out["done"]
    own = partial(check_settings, required=("toy",), paths=())
    with pytest.raises(ValueError, match="toy settings: 'toy' is required"):
        MethodSettings("toy", "toy", ToyConfig.from_dict, keys=("train",), settings_check=own).check({"train": TRAIN})


def test_the_entry_passes_the_inputs_section_and_job(settings, tmp_path):
    out = TOY.entry({**settings, "seed": 3}, tmp_path, dist="dist", device="cpu", callbacks=("cb",))
    assert out["args"] == ("model", settings["data"], {"width": 2}, TRAIN, tmp_path)
    assert out["kwargs"] == {"device": "cpu", "dist": "dist", "callbacks": ("cb",), "seed": 3}
    assert TOY.entry({**settings, "toy": None}, tmp_path, dist=None, device=None)["args"][2] == {}


@pytest.mark.parametrize("name", ["sft", "p1", "p2", "p4", "p5_heads"])
def test_registered_methods_are_made_by_the_factory(name):
    """Every registered method's entry is a `TrainingMethod`'s, under the path its `Method` names (part of a run's
    stamp: `records.trajectory_hash`, so unchanged), and its check that method's `MethodSettings`', in a module
    importing no torch (`test_house`)."""
    m = get_method(name)
    assert m.entry.endswith(".train:launch_entry") or m.entry == "mtp_core.train.sft:launch_entry"
    assert m.check.endswith("settings:launch_check")
    entry, check = resolve(m.entry), resolve(m.check)
    assert isinstance(entry.__self__, TrainingMethod) and check.__self__ is entry.__self__.settings
    assert check.__self__.name == name
