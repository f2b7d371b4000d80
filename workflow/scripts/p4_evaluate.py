"""Paper 4: one label's evaluation job (`mtp_core.papers.p4.jobs.evaluate_label`): the teacher-forced scores per
cycle offset on the held-out split, then every lm-eval task with each decoder setting; the model loads once.

snakemake.input       weights (trained checkpoint or the start model's directory), validation, task_<task> splits
snakemake.params.spec label, model (declared start model), checkpoint (trained dir or None), settings
                      ({setting: decoder params}), tf (data, rows, batch_size, max_tokens, template, dataset, task,
                      on_bad_row), tf_outputs ({setting: file}), tasks ({task: {data, outputs, settings}})
snakemake.output      results (every file of the job)
"""

import torch

from mtp_core.bench.prompt_sets import load_rule_model
from mtp_core.evaluate import check_task_data
from mtp_core.io import log_to_file
from mtp_core.papers.p4.jobs import evaluate_label

smk = snakemake
log_to_file(smk.log[0])
torch.set_num_threads(smk.threads)
spec = dict(smk.params.spec)
for task, t in spec["tasks"].items():  # bad rows fail here, before the model loads
    if t["data"] is not None:
        check_task_data(task, t["data"])
base = None if spec["checkpoint"] else (smk.input.get("weights") or [None])[0]
loaded = load_rule_model(smk.config, spec["model"], base, spec["checkpoint"])
evaluate_label(
    smk.config,
    loaded,
    label=spec["label"],
    model=spec["model"],
    tf=spec["tf"],
    tf_outputs=spec["tf_outputs"],
    tasks=spec["tasks"],
    settings=spec["settings"],
)
