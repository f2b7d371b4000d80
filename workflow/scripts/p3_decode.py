"""Paper 3: one decoding job, greedy and one method at its block complexities on one model, side by side with
the bench protocol (same weights, prompts and threads; warm-up; interleaved order; medians); one result JSON per
setting (tokens per forward with the bonus token, forward passes, tok/s, speed vs greedy, identical-to-greedy
fraction, each also per prompt category).

snakemake.input:   model (prepared checkpoint dir, absent for hub/local models), prompts (prompt-set JSONL)
snakemake.params:  decoders {setting label: params with `decoder`} (greedy first), prompt_set, per_category,
                   settings {max_new_tokens, batch_size}, bench {warmup, repeats, threads}
snakemake.output:  results (one JSON per setting, in `decoders` order; samples JSONL beside each)
snakemake.wildcards: model
"""

from mtp_core.bench.prompt_sets import decode_rule_job
from mtp_core.data.prompts import first_per_category
from mtp_core.io import log_to_file, read_jsonl

smk = snakemake
log_to_file(smk.log[0])
rows = first_per_category(list(read_jsonl(smk.input.prompts)), smk.params.per_category)
decode_rule_job(
    smk.config,
    smk.wildcards.model,
    smk.input.get("model") or None,
    rows,
    decoders=smk.params.decoders,
    outputs=smk.output.results,
    prompt_set=smk.params.prompt_set,
    settings=smk.params.settings,
    bench=smk.params.bench,
    paper="p3",
    run=smk.wildcards.model,
)
