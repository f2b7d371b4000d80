"""The bodies of paper 4's workflow jobs (the scripts in `workflow/scripts/p4_*.py` only parse the rule and call
these): one evaluation job per label (teacher-forced scores and every lm-eval task, the model loaded once), the speed
job (Table 3), the τ choice of the leaderboard.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from ...bench.prompt_sets import decode_prompt_set
from ...config.settings import config_hash
from ...data.rows import read_rows, resolve_template
from ...decoding import layers as L
from ...evaluate import EvalSettings, run_evaluation
from ...io import atomic_write_json
from ...models.load import LoadedModel
from ...results.write import make_result, write_result
from .cyclic import plt
from .settings import DMTDSpec
from .speed import measure_layer_costs, random_prompts
from .teacher_forced import VANILLA, TFRows, dmtd_scores, encode_tf_rows, setting_metrics, vanilla_scores

log = logging.getLogger(__name__)


def tf_data(loaded: LoadedModel, path: str, rows: int, max_tokens: int, template: str, on_bad_row: str) -> TFRows:
    """The first `rows` held-out rows as the model reads them."""
    tok = loaded.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else loaded.eos_ids[0]
    return encode_tf_rows(
        read_rows(path, on_bad_row)[:rows], tok, resolve_template(template, loaded.chat_template), max_tokens, pad
    )


def write_tf_results(
    config: dict,
    loaded: LoadedModel,
    data: TFRows,
    settings: Mapping[str, Mapping[str, Any]],
    outputs: Sequence[str],
    *,
    label: str,
    model: str,
    task: str,
    batch_size: int,
    data_settings: Mapping[str, Any],
) -> None:
    """Teacher-forced results of one label: `settings` = setting -> params (`{"decoder": "vanilla"}` or the `dmtd`
    params of one τ, all of one split), written to `outputs` in order."""
    n_layers = L.num_layers(loaded.model)
    dmtd = {s: p for s, p in settings.items() if p["decoder"] != VANILLA}
    tallies: dict[str, Any] = {}
    spec = None
    if dmtd:
        first = next(iter(dmtd.values()))
        spec = DMTDSpec.from_model(
            loaded.model,
            encoding_layers=first.get("encoding_layers"),
            decoding_layers=first.get("decoding_layers"),
            combine=first.get("combine"),
        )
        scores = dmtd_scores(loaded.model, spec, data, [int(p["tau"]) for p in dmtd.values()], batch_size)
        tallies = {s: {flt: t for (tau, flt), t in scores.items() if tau == int(p["tau"])} for s, p in dmtd.items()}
    if len(dmtd) < len(settings):
        tallies[VANILLA] = {"none": vanilla_scores(loaded.model, data, batch_size)}
    for (setting, params), out in zip(settings.items(), outputs):
        by_filter = tallies[setting]
        extra: dict[str, Any] = {"num_layers": n_layers}
        if spec is not None and params["decoder"] != VANILLA:
            tau = int(params["tau"])
            extra |= {
                "split": spec.name,
                "combine": spec.combine,
                "tau": tau,
                "plt": plt(n_layers, tau, spec.decoding_layers, spec.encoding_layers),
            }
            decoder = {
                "name": "dmtd",
                "lossless": tau == 1 and spec.combine == "select",
                "params": {
                    "tau": tau,
                    "encoding_layers": spec.encoding_layers,
                    "decoding_layers": spec.decoding_layers,
                    "combine": spec.combine,
                },
            }
        else:
            decoder = {"name": VANILLA, "lossless": True, "params": {}}
        result = make_result(
            kind="eval",
            paper="p4",
            run=label,
            model=model,
            task=task,
            decoder=decoder,
            n=len(data),
            metrics=setting_metrics(by_filter),
            decode_stats={},
            settings={**data_settings, **extra},
            scale=config["scale"],
            config_hash=config_hash(config),
        )
        write_result(out, result, next(iter(by_filter.values())).samples())
        log.info("%s %s %s: tf_acc %.4f", label, task, setting, result["metrics"]["tf_acc,none"]["value"] or 0.0)


def evaluate_label(
    config: dict,
    loaded: LoadedModel,
    *,
    label: str,
    model: str,
    tf: Mapping[str, Any],
    tf_outputs: Mapping[str, str],
    tasks: Mapping[str, Mapping[str, Any]],
    settings: Mapping[str, Mapping[str, Any]],
) -> None:
    """One evaluation job: the teacher-forced settings (`tf_outputs`: setting -> file; `tf`: data path, rows,
    batch_size, max_tokens, template, dataset, on_bad_row, task) and, for each task (`tasks[task]`: data path or None,
    outputs {setting: file}, EvalSettings overrides), lm-eval with each decoder setting of `settings`."""
    data = tf_data(loaded, tf["data"], int(tf["rows"]), int(tf["max_tokens"]), tf["template"], tf["on_bad_row"])
    tf_params = {s: settings.get(s, {"decoder": VANILLA}) for s in tf_outputs}
    write_tf_results(
        config,
        loaded,
        data,
        tf_params,
        list(tf_outputs.values()),
        label=label,
        model=model,
        task=tf["task"],
        batch_size=int(tf["batch_size"]),
        data_settings={
            "dataset": tf["dataset"],
            "split": "validation",
            "rows": len(data),
            "max_tokens": int(tf["max_tokens"]),
            "response_tokens": int((data.lengths - data.starts).sum()),
        },
    )
    for task, spec in tasks.items():
        es = EvalSettings.from_config(config, **dict(spec.get("settings") or {}))
        for setting, out in spec["outputs"].items():
            run_evaluation(
                config,
                loaded,
                setting,
                task,
                out,
                decoder_params=dict(settings[setting]),
                data_path=spec.get("data"),
                settings=es,
                paper="p4",
                run=label,
                model=model,
            )


def speed_job(
    config: dict,
    loaded: LoadedModel,
    *,
    run: str,
    spec: Mapping[str, Any],
    settings: Mapping[str, Mapping[str, Any]],
    outputs: Mapping[int, Sequence[str]],
    layer_costs: Mapping[int, str],
    bench: Mapping[str, Any],
) -> None:
    """Table 3's job: random prompts, no stop criteria, greedy and `dmtd` at each τ side by side per batch size
    (`outputs[batch]`: one file per setting, in order); the measured layer costs per batch size."""
    if bench.get("threads"):
        torch.set_num_threads(int(bench["threads"]))
    quiet = dataclasses.replace(loaded, eos_ids=(), stop_strings=())
    prompts = random_prompts(
        loaded.tokenizer,
        loaded.model.config.vocab_size,
        int(spec["prompts"]),
        int(spec["prompt_tokens"]),
        int(spec.get("seed", 0)),
    )
    rows = [{"id": p.id, "category": p.category} for p in prompts]
    taus = [int(p["tau"]) for p in settings.values() if p["decoder"] == "dmtd"]
    split = DMTDSpec.from_model(loaded.model)
    for batch, outs in outputs.items():
        load = os.getloadavg()[0]
        costs = measure_layer_costs(loaded.model, split, [p.ids for p in prompts[:batch]], taus)
        atomic_write_json(layer_costs[batch], {**costs, "load_1min": load, "threads": torch.get_num_threads()})
        decode_prompt_set(
            quiet,
            rows,
            decoders={s: dict(p) for s, p in settings.items()},
            outputs=list(outs),
            prompt_set=f"random-{spec['prompt_tokens']}",
            scale=config["scale"],
            config_hash=config_hash(config),
            max_new_tokens=int(spec["new_tokens"]),
            batch_size=int(batch),
            threads=int(bench["threads"]),
            warmup=int(bench["warmup"]),
            repeats=int(bench["repeats"]),
            paper="p4",
            run=run,
            prompts=prompts,
            extra_settings={"load_1min": load, "prompt_tokens": int(spec["prompt_tokens"])},
        )
        log.info("speed batch %d done (load %.2f at the start)", batch, load)
