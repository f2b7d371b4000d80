"""Declared models: where each one's weights live (how a `finetuned` one is trained: `train.finetune`).

* `gguf`, `tiny` and `scratch` models are materialised once by `prepare_model` at `results/models/base/<name>/`
  (a scratch model: random weights of its architecture and sizes, the tokenizer of its `tokenizer` model);
* `finetuned` models (`base` + `dataset` + `train` [+ `sft`]; `mtp_core.train.sft`) are trained by the
  launcher (method `sft`) in `results/models/finetuned/<name>/`, the final model in its `model/`;
* `hub` and `local` models are loaded where they are (no directory here).

One place for these paths, used by the workflow (`model_dir` in common.smk), the paper plans and the CLI.
"""

from __future__ import annotations

from ..config import hub_mirror, layout
from ..config.layout import RESULTS
from ..config.settings import ConfigError, checkpoint_location, deep_merge

MATERIALISED_SOURCES = ("gguf", "tiny", "scratch")
FINETUNED = "finetuned"


def model_dir(config: dict, name: str, results: str = RESULTS) -> str | None:
    """The checkpoint directory of model `name` under `results`, or None for hub/local models."""
    source = config["models"][name]["source"]
    if source in MATERIALISED_SOURCES:
        return layout.run_dir("base", name, results)
    if source == FINETUNED:
        return f"{finetune_run_dir(name, results)}/model"
    return None


def model_inputs(config: dict, name: str) -> list[str]:
    """What a rule loading model `name` reads: its prepared checkpoint, or its hub stand-in (none for a hub or
    local model without a mirror)."""
    d = model_dir(config, name)
    return [d] if d else hub_mirror.inputs(config, config["models"][name].get("path"))


def declared_layers(config: dict, name: str, results: str = RESULTS) -> tuple[str, int] | None:
    """(model type, number of decoder layers) of model `name`, when known without loading weights: a tiny model's
    spec, a fine-tuned model's base, or the `config.json` of a local, prepared (gguf) or locally cached hub
    checkpoint; None when nothing says it yet (e.g. a GGUF not converted yet), so checks that need it run later."""
    import json
    from pathlib import Path

    spec = config["models"][name]
    source = spec["source"]
    if source == "tiny":
        return spec["arch"], int(spec.get("num_layers", 2))
    if source == FINETUNED:
        return declared_layers(config, spec["base"], results)
    if source == "hub":
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(spec["id"], "config.json", revision=spec.get("revision"))
        path = Path(found) if isinstance(found, str) else None
    else:
        path = Path(spec["path"] if source == "local" else model_dir(config, name, results)) / "config.json"
    if path is None or not path.is_file():
        return None
    cfg = json.loads(path.read_text())
    return str(cfg.get("model_type")), int(cfg["num_hidden_layers"])


def tokenizer_location(config: dict, name: str, results: str = RESULTS) -> tuple[str, dict]:
    """Where the tokenizer of a scratch model's `tokenizer` model is (`config.settings.checkpoint_location`)."""
    tok = config["models"][name]["tokenizer"]
    return checkpoint_location(config["models"][tok], model_dir(config, tok, results))


def materialised_models(config: dict) -> list[str]:
    return [n for n, m in config["models"].items() if m["source"] in MATERIALISED_SOURCES]


def finetuned_models(config: dict) -> list[str]:
    return [n for n, m in config["models"].items() if m["source"] == FINETUNED]


def finetune_run_dir(name: str, results: str = RESULTS) -> str:
    return layout.run_dir(FINETUNED, name, results)


def finetune_record(name: str) -> str:
    """The launcher's record of the finished fine-tune (written on success only)."""
    return f"{finetune_run_dir(name)}/train.json"


def launcher_settings(config: dict, name: str) -> dict:
    """The top-level `launcher`, then the model's own `launcher`, merged key by key."""
    return deep_merge(config.get("launcher") or {}, config["models"][name].get("launcher"))


def check(config: dict) -> None:
    """Scratch models: `tokenizer` names a declared model with a tokenizer of its own. Raises ConfigError naming
    the key."""
    models = config["models"]
    for name, spec in models.items():
        if spec["source"] == "scratch":
            tok = spec["tokenizer"]
            if tok not in models or models[tok]["source"] == "scratch":
                raise ConfigError(
                    f"models.{name}.tokenizer: {tok!r} is not a declared model with a tokenizer of its own "
                    f"(declared: {', '.join(sorted(models))})"
                )
