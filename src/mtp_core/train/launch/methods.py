"""Training methods the launcher runs, by name (`registry.Method`): the core's `sft` (fine-tunes of `finetuned`
models) and every registered paper's (`Paper.methods`), or any `module:attr` (a `Method`, or an entry function);
the settings check and loading every training of a declared model on (query, response) rows shares;
`MethodSettings`, which makes a method's check (torch-free) from what is its own, and `TrainingMethod` its entry.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...config import registry
from ...config.registry import Method
from ..config import TrainConfig

CORE_METHODS = (
    Method(
        "sft",
        "mtp_core.train.sft:launch_entry",
        "mtp_core.train.sft_settings:launch_check",
        "mtp_core.train.finetune:finetune_from_config",
    ),
)
# the settings every training of a declared model on (query, response) rows has (`check_model_data_train`)
MODEL_DATA_KEYS = ("model", "base_dir", "base_stamp", "data", "train", "on_bad_row")


def resolve(path: str) -> Any:
    """The object at `module:attr` (attr may be dotted)."""
    module, sep, attr = path.partition(":")
    if not sep:
        raise ValueError(f"{path!r} is not of the form module:function")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def methods() -> dict[str, Method]:
    """Every method by name: the core's, then each registered paper's (a name used twice is an error)."""
    out = {m.name: m for m in CORE_METHODS}
    for paper in registry.papers().values():
        for m in paper.methods:
            if m.name in out:
                raise ValueError(f"training method {m.name!r} of paper {paper.name} is registered twice")
            out[m.name] = m
    return out


def get_method(name: str) -> Method:
    """A registered method, or `module:attr` naming a `Method` or an entry function (no check, no resolver)."""
    known = methods()
    if name in known:
        return known[name]
    if ":" in name:
        obj = resolve(name)
        return obj if isinstance(obj, Method) else Method(name, name)
    raise ValueError(f"unknown training method {name!r} (registered: {', '.join(sorted(known))}; or module:function)")


def _abs(path: str | None) -> str | None:
    return None if path is None else str(Path(path).resolve())


def known_keys(settings: dict, allowed: Sequence[str], what: str) -> None:
    unknown = sorted(set(settings) - set(allowed))
    if unknown:
        raise ValueError(f"{what}: unknown setting(s) {', '.join(unknown)} (known: {', '.join(sorted(allowed))})")


def check_settings(
    settings: dict, allowed: Sequence[str], required: Sequence[str], paths: Sequence[str], what: str
) -> dict:
    """The checks every training method's settings share: no unknown key, the `required` ones present, `train` a
    valid TrainConfig, and the `paths` given (not None) existing, returned absolute (the job may run elsewhere)."""
    known_keys(settings, allowed, what)
    for key in required:
        if key not in settings:
            raise ValueError(f"{what}: {key!r} is required")
    TrainConfig.from_dict(settings["train"])
    out = dict(settings)
    for key in paths:
        if settings.get(key) is not None:
            out[key] = _abs(settings[key])
            if not Path(out[key]).exists():
                raise ValueError(f"{what}.{key}: {settings[key]} does not exist")
    return out


def check_model_data_train(settings: dict, extra_keys: Sequence[str], what: str) -> dict:
    """The settings every training of a declared model on rows has (`MODEL_DATA_KEYS`) plus `extra_keys`:
    `model` (a model spec as in `models:`, with `name`), `base_dir` (its prepared checkpoint, for
    gguf/tiny/finetuned sources), `base_stamp` (for a fine-tuned base: what trained it, so a retrained base
    supersedes old state; `train.finetune.base_stamp`), `data` (train JSONL with query/response), `train`
    (TrainConfig keys), `on_bad_row`. Paths come back absolute."""
    out = check_settings(
        settings, (*MODEL_DATA_KEYS, *extra_keys), ("model", "data", "train"), ("data", "base_dir"), what
    )
    if not isinstance(settings["model"], dict) or "source" not in settings["model"]:
        raise ValueError(f"{what}.model: a model spec with `source` (as declared under `models:`)")
    if not Path(out["data"]).is_file():
        raise ValueError(f"{what}.data: {settings['data']} is not a file")
    if out.get("base_dir") is not None and not Path(out["base_dir"]).is_dir():
        raise ValueError(f"{what}.base_dir: {settings['base_dir']} is not a directory")
    if settings["model"]["source"] == "local":
        out["model"] = {**settings["model"], "path": _abs(settings["model"]["path"])}
    return out


def load_model_and_rows(settings: dict) -> tuple[Any, list[dict]]:
    """The base model and the (query, response) train rows of checked settings (`check_model_data_train`)."""
    from ...data.rows import read_rows
    from ...models.load import load_model

    loaded = load_model(settings["model"], base_dir=settings.get("base_dir"))
    return loaded, read_rows(settings["data"], settings.get("on_bad_row", "error"))


# what a method's `load` gives its train function: the inputs before the method's section, and extra keywords
Inputs = tuple[tuple[Any, ...], dict[str, Any]]


def model_and_rows(settings: dict) -> Inputs:
    """`TrainingMethod.load` of a training of a declared model on rows: (loaded model, rows), no extra keyword."""
    return load_model_and_rows(settings), {}


@dataclass(frozen=True)
class MethodSettings:
    """The `check` of a launcher method (`registry.Method`; a module exposes it as `launch_check`, the path its
    `Method` names), made from what is the method's own and importing no torch (the workflow's plan checks run it):
    its `name` (errors say "<name> settings"), its `section` of the settings and that section's `config` (a
    `from_dict`), and hooks where it differs from a training of a declared model on rows.

    * `settings_check(settings, allowed, what=...)`: the shared check, given `section` + `keys` as the allowed
      keys: `check_model_data_train` (adds `MODEL_DATA_KEYS`), or a `functools.partial` of `check_settings`
      with the method's own `required` and `paths`.
    * `prepare(settings)` before it (e.g. resolving `train`), `finish(checked)` after it (e.g. more paths made
      absolute).
    """

    name: str
    section: str
    config: Callable[[Any], Any]
    keys: Sequence[str] = ()
    settings_check: Callable[..., dict] = check_model_data_train
    prepare: Callable[[dict], dict] | None = None
    finish: Callable[[dict], dict] | None = None

    def check(self, settings: dict) -> dict:
        """Checked settings (paths absolute): `prepare`, the shared `settings_check`, the section's `config`,
        `finish`."""
        if self.prepare is not None:
            settings = self.prepare(settings)
        out = self.settings_check(settings, (self.section, *self.keys), what=f"{self.name} settings")
        self.config(settings.get(self.section))
        return out if self.finish is None else self.finish(out)


@dataclass(frozen=True)
class TrainingMethod:
    """The `entry` of a launcher method (a module exposes it as `launch_entry`, the path its `Method` names: part
    of a run's stamp, `records.trajectory_hash`), beside the training code: its `settings` (the check side), its
    `train` function and `load(settings) -> (inputs, keywords)` in the job (`model_and_rows`, or the method's own
    loading)."""

    settings: MethodSettings
    train: Callable[..., Any]
    load: Callable[[dict], Inputs] = model_and_rows

    def entry(self, settings: dict, run_dir: Path, *, dist: Any, device: Any, callbacks: Sequence[Any] = ()) -> Any:
        """In the job: `load` the inputs, then `train(*inputs, section, train, run_dir, ...)` (it resumes from
        `run_dir/checkpoints`)."""
        inputs, keywords = self.load(settings)
        return self.train(
            *inputs,
            settings.get(self.settings.section) or {},
            settings["train"],
            run_dir,
            device=device,
            dist=dist,
            callbacks=callbacks,
            **keywords,
        )
