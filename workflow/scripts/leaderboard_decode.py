"""The leaderboard: one prompt set's job, every row side by side with the bench protocol (same prompts and threads;
warm-up; interleaved order; per-batch medians), on the leaderboard model or a checkpoint trained from it; one result
JSON per row (tok/s, speedup vs greedy measured and modeled, tokens per forward, forward passes, identical-to-greedy
fraction, task accuracy where the prompts carry answers; samples JSONL beside each).

snakemake.input:   model (prepared checkpoint dir, absent for hub/local models), prompts, rows (the rows' checkpoints and files)
snakemake.params:  rows (mtp_core.bench.leaderboard.plan.job_rows), model, n (prompts per category), max_new_tokens,
                   batch_size, bench {warmup, repeats, threads}
snakemake.output:  results (one JSON per row, in row order)
snakemake.wildcards: prompt_set
"""

from mtp_core.bench.prompt_sets import leaderboard_rule_job
from mtp_core.data.prompts import first_per_category
from mtp_core.io import log_to_file, read_jsonl

smk = snakemake
log_to_file(smk.log[0])
leaderboard_rule_job(
    smk.config,
    first_per_category(list(read_jsonl(smk.input.prompts)), smk.params.n),
    model=smk.params.model,
    model_dir=smk.input.get("model") or None,
    job_rows=smk.params.rows,
    outputs=smk.output.results,
    prompt_set=smk.wildcards.prompt_set,
    max_new_tokens=smk.params.max_new_tokens,
    batch_size=smk.params.batch_size,
    bench=smk.params.bench,
)
