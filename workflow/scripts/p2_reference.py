"""Paper 2: greedy references of one trunk on every prompt set (past the budget, ignoring stops) and the main head's
Top-N mass on the validation windows (`mtp_core.papers.p2.evaluate`).

snakemake.input:   model (a base model's checkpoint or a run's export with its trained trunk), prompts, shards,
                   validation (the validation dataset's shards, when the section names one)
snakemake.params:  prompt_sets {set: prompts per category}, windows (P2Plan.windows_spec),
                   settings {max_new_tokens, reference_extra_tokens}
snakemake.output:  results (one JSON per prompt set, in prompt_sets order), topn_csv, topn
snakemake.wildcards: main
"""

import torch

from mtp_core.config.settings import config_hash
from mtp_core.io import log_to_file
from mtp_core.papers.p2.data import validation_rows
from mtp_core.papers.p2.evaluate import reference_job, topn_mass
from mtp_core.papers.p2.jobs import load_main, prompt_rows

smk = snakemake
log_to_file(smk.log[0])
torch.set_num_threads(smk.threads)
loaded = load_main(smk.config, smk.wildcards.main)
sets = dict(smk.params.prompt_sets)
reference_job(
    loaded,
    prompt_rows(smk.input.prompts, sets, single_turn=True),
    dict(zip(sets, smk.output.results)),
    smk.params.settings["max_new_tokens"],
    smk.params.settings["reference_extra_tokens"],
    batch_size=8,
    main=smk.wildcards.main,
    scale=smk.config["scale"],
    config_hash=config_hash(smk.config),
)
windows = validation_rows(smk.params.windows, smk.input.shards, smk.input.get("validation"))
topn_mass(loaded.model, windows, smk.output.topn_csv, smk.output.topn)
