"""Paper 1: one student (final model or a step export) on one task under the whole decoding sweep.

The student loads once; each decoder setting writes its own result JSON (+ .samples.jsonl).
snakemake.input      checkpoint (final model) or summary (training summary; the export is params.checkpoint),
                     data (the test split of a local task)
snakemake.params     model (base model name), task, run (run label: `<run>` or `<run>@step<N>`),
                     decoders ({label: {decoder: registry name, **params}}, in output order),
                     settings (EvalSettings overrides), checkpoint (the HF directory to load)
snakemake.output.results  one JSON per decoder label
"""

import torch

from mtp_core.config.settings import model_spec
from mtp_core.evaluate import EvalSettings, check_task_data, run_evaluation
from mtp_core.io import log_to_file
from mtp_core.models.load import load_model

smk = snakemake
log_to_file(smk.log[0])
torch.set_num_threads(smk.threads)
task, data = smk.params.task, smk.input.get("data") or None
if data is not None:  # a task on local data: bad rows fail here, before the model loads
    check_task_data(task, data)
decoders = dict(smk.params.decoders)
if len(decoders) != len(smk.output.results):
    raise ValueError(f"{len(decoders)} decoders but {len(smk.output.results)} result paths")
loaded = load_model(
    model_spec(smk.config, smk.params.model),
    checkpoint=smk.params.checkpoint,
    device="cuda" if torch.cuda.is_available() else "cpu",
    dtype=smk.params.dtype,
)
settings = EvalSettings.from_config(smk.config, **dict(smk.params.settings))
for (label, params), out in zip(decoders.items(), smk.output.results):
    run_evaluation(
        smk.config,
        loaded,
        label,
        task,
        out,
        decoder_params=dict(params),
        data_path=data,
        settings=settings,
        paper="p1",
        run=smk.params.run,
        model=smk.params.model,
    )
