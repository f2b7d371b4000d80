"""Run every configured decoder on one prompt set with the bench protocol; one result JSON per decoder.

snakemake.input:   model (prepared checkpoint dir, absent for hub/local models), prompts (prompt-set JSONL)
snakemake.params:  decoders {name: params}, settings {max_new_tokens, batch_size}, bench {warmup, repeats, threads}
snakemake.output:  results (one JSON per decoder, in `decoders` order; samples JSONL beside each)
snakemake.wildcards: model, prompt_set
"""

from mtp_core.bench.prompt_sets import decode_rule_job
from mtp_core.io import log_to_file, read_jsonl

smk = snakemake
log_to_file(smk.log[0])
decode_rule_job(
    smk.config,
    smk.wildcards.model,
    smk.input.get("model") or None,
    list(read_jsonl(smk.input.prompts)),
    decoders=smk.params.decoders,
    outputs=smk.output.results,
    prompt_set=smk.wildcards.prompt_set,
    settings=smk.params.settings,
    bench=smk.params.bench,
)
