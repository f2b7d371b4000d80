"""How a declared `finetuned` model is trained (`base` + `dataset` + `train` [+ `sft`]): the settings of its
training by the launcher's method `sft` (`train.sft`), the stamp that names that training in the trainings that
start from the model (`base_stamp`), and the config check of every fine-tuned model. Where its weights live is
`models.plan`'s.
"""

from __future__ import annotations

from typing import Any

from ..config.settings import ConfigError, dataset_on_bad_row, model_spec
from ..data.rows import TRAIN_DATA_KINDS, train_data_path
from ..models.plan import FINETUNED, finetuned_models, launcher_settings, model_dir, model_inputs


def base_stamp(config: dict, name: str) -> str | None:
    """For a fine-tuned model: the trajectory hash of its training (its base's stamp included, recursively),
    so a training that starts from it is stamped differently once it is retrained (`launch.trajectory_hash`
    then supersedes the old state instead of resuming it); None for other sources, whose spec identifies them."""
    from .launch import get_method, trajectory_hash

    if config["models"][name]["source"] != FINETUNED:
        return None
    return trajectory_hash("sft", get_method("sft").entry, finetune_settings(config, name))


def with_base_stamp(settings: dict, config: dict, name: str) -> dict:
    """`settings` plus `base_stamp` when model `name` is fine-tuned (unchanged otherwise, so the stamps of
    trainings from prepared or hub models stay what they were)."""
    stamp = base_stamp(config, name)
    return settings if stamp is None else {**settings, "base_stamp": stamp}


def rows_training_settings(config: dict, model: str, dataset: str, train: dict, **method: Any) -> dict:
    """Settings of a training of `model` on the (query, response) rows of `dataset`: the model's spec and checkpoint
    directory, the train rows, `train`, the method's own sections (`method`, e.g. `sft={...}`), the dataset's
    bad-row policy, and `base_stamp` when the model is fine-tuned (`with_base_stamp`)."""
    settings = {
        "model": model_spec(config, model),
        "base_dir": model_dir(config, model),
        "data": train_data_path(dataset),
        "train": train,
        **method,
        "on_bad_row": dataset_on_bad_row(config, dataset),
    }
    return with_base_stamp(settings, config, model)


def rows_training_inputs(config: dict, model: str, dataset: str) -> dict[str, list[str] | str]:
    """The input files of such a training (a workflow rule's inputs): the model's, and the train rows."""
    return {"model": model_inputs(config, model), "data": train_data_path(dataset)}


def finetune_settings(config: dict, name: str) -> dict:
    """Settings of `mtp-repro train --method sft` for fine-tuned model `name`: the base model's spec and
    checkpoint directory (and `base_stamp` when the base is fine-tuned too), the dataset's train rows, `train`
    (threads default to the config's) and `sft`."""
    if config["models"][name]["source"] != FINETUNED:
        raise ValueError(f"model {name!r} is not a fine-tuned model (source {config['models'][name]['source']!r})")
    spec = config["models"][name]
    train = {"threads": config.get("threads"), **spec["train"]}
    return rows_training_settings(config, spec["base"], spec["dataset"], train, sft=dict(spec.get("sft") or {}))


def finetune_from_config(config: dict, name: str) -> tuple[dict, dict]:
    """The launcher's resolver of method `sft`: settings and launcher settings of fine-tuned model `name`."""
    return finetune_settings(config, name), launcher_settings(config, name)


def check(config: dict) -> None:
    """Fine-tuned models: `base` is another declared model (no cycles), `dataset` a declared math or conversation
    dataset, `chat_template` and `system_prompt` say how it was trained (the base's, under sft.template auto),
    `train` / `sft` / `launcher` build their configs and the batch splits over the launcher's processes. Raises ConfigError naming the key."""
    from .config import TrainConfig
    from .launch.settings import check_training
    from .sft_settings import SFTConfig

    models, datasets = config["models"], config["datasets"]
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
