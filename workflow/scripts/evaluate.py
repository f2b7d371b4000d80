"""Evaluate one (model, decoder, task) with lm-eval through the `mtp` model class; one result JSON.

snakemake.input (named):
    model       optional: the prepared checkpoint dir of a gguf/tiny model (common.smk `model_input`)
    checkpoint  optional: a trained student in HF format (paper rules); replaces `model` as the weights
    data        optional: the test split a local task reads, `results/data/<dataset>/test.jsonl` with
                <dataset> = `mtp_core.evaluate.task_dataset(config, task)`; absent for lm-eval built-ins
snakemake.params:
    model           name of the declared model (a key of config["models"])
    decoders        {decoder registry name: parameters}, run in order on the one loaded model
    task            lm-eval task name
    paper, run      optional result labels (default "base" and the model name)
    settings        optional dict of `EvalSettings` overrides (default: config["evaluation"] as is)
snakemake.output:
    results     one result JSON per decoder (same order as `decoders`); each gets a
                `<result without .json>.samples.jsonl` beside it
snakemake.log[0]  the log (Python logging, lm-eval's messages and progress bars)
Threads: torch uses config["threads"].
"""

import torch

from mtp_core.config.settings import model_spec
from mtp_core.evaluate import EvalSettings, check_task_data, run_evaluation, task_dataset
from mtp_core.io import log_to_file
from mtp_core.models.load import load_model

smk = snakemake
log_to_file(smk.log[0])
torch.set_num_threads(smk.config["threads"])

task, data = smk.params.task, smk.input.get("data") or None  # an empty named input reads as []
if task_dataset(smk.config, task) is not None:
    if data is None:
        raise ValueError(f"task {task!r} needs `input.data`, its test split")
    check_task_data(task, data)  # bad rows fail here, before the model loads
spec = model_spec(smk.config, smk.params.model)
loaded = load_model(
    spec,
    base_dir=smk.input.get("model") or None,
    checkpoint=smk.input.get("checkpoint") or None,
    device="cuda" if torch.cuda.is_available() else "cpu",
)
settings = EvalSettings.from_config(smk.config, **dict(smk.params.get("settings") or {}))
decoders = dict(smk.params.decoders)
if len(decoders) != len(smk.output.results):
    raise ValueError(f"{len(decoders)} decoders but {len(smk.output.results)} result paths")
for (name, params), out in zip(decoders.items(), smk.output.results):
    run_evaluation(
        smk.config,
        loaded,
        name,
        task,
        out,
        decoder_params=dict(params or {}),
        data_path=data,
        settings=settings,
        paper=smk.params.get("paper", "base"),
        run=smk.params.get("run"),
        model=smk.params.model,
    )
