"""Paper 2: AR / CAR of one run's heads at every draft count from the teacher-forced simulation over its trunk's
greedy references, and the run's validation metrics (`mtp_core.papers.p2.evaluate`).

snakemake.input:   run (its export), main (its trunk), references (one per prompt set), shards, validation
                   (the validation dataset's shards, when the section names one), base (the untrained
                   trunk, for KL(base ‖ main), when the run trained its trunk)
snakemake.params:  depths, prompt_sets, main, heads (the heads directory), method (P2Config keys), windows,
                   max_new_tokens, base (the run's base model when it trained its trunk, else None)
snakemake.output:  results (per prompt set, per depth, in that order), validation
snakemake.wildcards: run
"""

import torch

from mtp_core.config.settings import config_hash
from mtp_core.io import log_to_file
from mtp_core.models.heads import load_heads
from mtp_core.papers.p2.data import validation_rows
from mtp_core.papers.p2.evaluate import acceptance_job, validation_metrics
from mtp_core.papers.p2.jobs import load_main
from mtp_core.papers.p2.settings import P2Config

smk = snakemake
log_to_file(smk.log[0])
torch.set_num_threads(smk.threads)
loaded = load_main(smk.config, smk.params.main)
heads = load_heads(smk.params.heads, loaded.model)
depths, sets = list(smk.params.depths), list(smk.params.prompt_sets)
outputs = dict(zip([(ps, d) for ps in sets for d in depths], smk.output.results))
acceptance_job(
    loaded,
    heads,
    smk.wildcards.run,
    depths,
    dict(zip(sets, smk.input.references)),
    outputs,
    smk.params.max_new_tokens,
    scale=smk.config["scale"],
    config_hash=config_hash(smk.config),
    heads_dir=smk.params.heads,
)
windows = validation_rows(smk.params.windows, smk.input.shards, smk.input.get("validation"))
base = load_main(smk.config, smk.params.base) if smk.params.base else None
method = P2Config.from_dict(smk.params.method)
validation_metrics(loaded, heads, windows, method.loss, smk.output.validation, base)
