"""Paper 5: the model's greedy answers to every task's training prompts with its hidden states (the heads' data).

snakemake.input:   model (prepared checkpoint dir), train (the tasks' training prompt files, in `params.tasks` order)
snakemake.params:  tasks, settings {max_new_tokens, batch_size}
snakemake.output:  data (directory: rows.jsonl, hidden.npy, index.json)
"""

from mtp_core.bench.prompt_sets import load_rule_model
from mtp_core.io import log_to_file
from mtp_core.papers.p5.jobs import selfdistill_job
from mtp_core.papers.p5.plan import P5Plan

smk = snakemake
log_to_file(smk.log[0])
loaded = load_rule_model(smk.config, P5Plan(smk.config).s.model, smk.input.get("model") or None)
s = dict(smk.params.settings)
selfdistill_job(
    loaded,
    dict(zip(smk.params.tasks, smk.input.train)),
    smk.output.data,
    s["max_new_tokens"],
    s["batch_size"],
)
