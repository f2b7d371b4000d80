"""Declared models: where each one's weights live, and how a `finetuned` model is trained.

* `gguf`, `tiny` and `scratch` models are materialised once by `prepare_model` at `results/models/base/<name>/`
  (a scratch model: random weights of its architecture and sizes, the tokenizer of its `tokenizer` model);
* `finetuned` models (`base` + `dataset` + `train` [+ `sft`]; `mtp_core.train.sft`) are trained by the
  launcher (method `sft`) in `results/models/finetuned/<name>/`, the final model in its `model/`;
* `hub` and `local` models are loaded where they are (no directory here).

One place for these paths, used by the workflow (`model_dir` in common.smk), the paper plans and the CLI.
"""

from __future__ import annotations

from .config.settings import ConfigError, checkpoint_location, dataset_on_bad_row, deep_merge, model_spec
from .data.rows import TRAIN_DATA_KINDS, train_data_path

RESULTS = "results"
MATERIALISED_SOURCES = ("gguf", "tiny", "scratch")
FINETUNED = "finetuned"


def model_dir(config: dict, name: str, results: str = RESULTS) -> str | None:
    """The checkpoint directory of model `name` under `results`, or None for hub/local models."""
    source = config["models"][name]["source"]
    if source in MATERIALISED_SOURCES:
        return f"{results}/models/base/{name}"
    if source == FINETUNED:
        return f"{finetune_run_dir(name, results)}/model"
    return None


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


def base_stamp(config: dict, name: str) -> str | None:
    """For a fine-tuned model: the trajectory hash of its training (its base's stamp included, recursively),
    so a training that starts from it is stamped differently once it is retrained (`launch.trajectory_hash`
    then supersedes the old state instead of resuming it); None for other sources, whose spec identifies them."""
    from .train.launch import get_method, trajectory_hash

    if config["models"][name]["source"] != FINETUNED:
        return None
    return trajectory_hash("sft", get_method("sft").entry, finetune_settings(config, name))


def with_base_stamp(settings: dict, config: dict, name: str) -> dict:
    """`settings` plus `base_stamp` when model `name` is fine-tuned (unchanged otherwise, so the stamps of
    trainings from prepared or hub models stay what they were)."""
    stamp = base_stamp(config, name)
    return settings if stamp is None else {**settings, "base_stamp": stamp}


def tokenizer_location(config: dict, name: str, results: str = RESULTS) -> tuple[str, dict]:
    """Where the tokenizer of a scratch model's `tokenizer` model is (`config.settings.checkpoint_location`)."""
    tok = config["models"][name]["tokenizer"]
    return checkpoint_location(config["models"][tok], model_dir(config, tok, results))


def materialised_models(config: dict) -> list[str]:
    return [n for n, m in config["models"].items() if m["source"] in MATERIALISED_SOURCES]


def finetuned_models(config: dict) -> list[str]:
    return [n for n, m in config["models"].items() if m["source"] == FINETUNED]


def finetune_run_dir(name: str, results: str = RESULTS) -> str:
    return f"{results}/models/{FINETUNED}/{name}"


def finetune_record(name: str) -> str:
    """The launcher's record of the finished fine-tune (written on success only)."""
    return f"{finetune_run_dir(name)}/train.json"


def finetune_settings(config: dict, name: str) -> dict:
    """Settings of `mtp-repro train --method sft` for fine-tuned model `name`: the base model's spec and
    checkpoint directory (and `base_stamp` when the base is fine-tuned too), the dataset's train rows, `train`
    (threads default to the config's) and `sft`."""
    if config["models"][name]["source"] != FINETUNED:
        raise ValueError(f"model {name!r} is not a fine-tuned model (source {config['models'][name]['source']!r})")
    spec = config["models"][name]
    base = spec["base"]
    return with_base_stamp(
        {
            "model": model_spec(config, base),
            "base_dir": model_dir(config, base),
            "data": train_data_path(spec["dataset"]),
            "train": {"threads": config.get("threads"), **spec["train"]},
            "sft": dict(spec.get("sft") or {}),
            "on_bad_row": dataset_on_bad_row(config, spec["dataset"]),
        },
        config,
        base,
    )


def finetune_from_config(config: dict, name: str) -> tuple[dict, dict]:
    """The launcher's resolver of method `sft`: settings and launcher settings of fine-tuned model `name`."""
    return finetune_settings(config, name), launcher_settings(config, name)


def launcher_settings(config: dict, name: str) -> dict:
    """The top-level `launcher`, then the model's own `launcher`, merged key by key."""
    return deep_merge(config.get("launcher") or {}, config["models"][name].get("launcher"))


def check(config: dict) -> None:
    """Fine-tuned models: `base` is another declared model (no cycles), `dataset` a declared math or conversation
    dataset, `chat_template` and `system_prompt` say how it was trained (the base's, under sft.template auto),
    `train` / `sft` / `launcher` build their configs and the batch splits over the launcher's processes. Raises ConfigError naming the key."""
    from .train.config import TrainConfig
    from .train.launch.settings import check_training
    from .train.sft_settings import SFTConfig

    models, datasets = config["models"], config["datasets"]
    for name, spec in models.items():
        if spec["source"] == "scratch":
            tok = spec["tokenizer"]
            if tok not in models or models[tok]["source"] == "scratch":
                raise ConfigError(
                    f"models.{name}.tokenizer: {tok!r} is not a declared model with a tokenizer of its own "
                    f"(declared: {', '.join(sorted(models))})"
                )
    for name in finetuned_models(config):
        where, spec = f"models.{name}", models[name]
        seen, cur = [name], spec["base"]
        while True:
            if cur not in models:
                raise ConfigError(
                    f"{where}.base: model {cur!r} is not declared (declared: {', '.join(sorted(models))})"
                )
            if cur in seen:
                raise ConfigError(f"{where}.base: a cycle of fine-tuned models ({' -> '.join(seen + [cur])})")
            if models[cur]["source"] != FINETUNED:
                break
            seen.append(cur)
            cur = models[cur]["base"]
        ds = spec["dataset"]
        if ds not in datasets:
            raise ConfigError(
                f"{where}.dataset: dataset {ds!r} is not declared (declared: {', '.join(sorted(datasets))})"
            )
        if datasets[ds]["kind"] not in TRAIN_DATA_KINDS:
            raise ConfigError(
                f"{where}.dataset: {ds!r} is of kind {datasets[ds]['kind']!r}; fine-tuning reads "
                f"(query, response) rows of {', '.join(TRAIN_DATA_KINDS)}"
            )
        template = (spec.get("sft") or {}).get("template", "auto")
        trained_chat = template == "chat" or (
            template == "auto" and bool(models[spec["base"]].get("chat_template", True))
        )
        if bool(spec.get("chat_template", True)) != trained_chat:
            raise ConfigError(
                f"{where}.chat_template: {spec.get('chat_template', True)} but it is fine-tuned "
                f"{'with' if trained_chat else 'without'} the chat template (sft.template {template!r}, "
                f"base {spec['base']!r}): set chat_template: {str(trained_chat).lower()}"
            )
        base_system = models[spec["base"]].get("system_prompt", "default")
        if spec.get("system_prompt", "default") != base_system:
            raise ConfigError(
                f"{where}.system_prompt: {spec.get('system_prompt', 'default')!r} but its base {spec['base']!r} is "
                f"fine-tuned with {base_system!r}: a model is used the way it was trained"
            )
        tc = spec["train"]
        warmup, steps = tc.get("warmup_steps", TrainConfig.warmup_steps), tc.get("max_steps", 0)
        if steps and warmup >= steps:
            raise ConfigError(
                f"{where}.train: warmup_steps {warmup} >= max_steps {steps}: the learning rate would "
                f"never reach lr (the default warm-up is paper 1's {TrainConfig.warmup_steps} steps)"
            )
        check_training(where, spec.get("train"), launcher_settings(config, name))
        try:
            SFTConfig.from_dict(spec.get("sft"))
        except (ValueError, TypeError) as e:
            raise ConfigError(f"{where}.sft: {e}") from None
