"""Paper 5: one task's decoding job, greedy and Table 1's methods side by side with the bench protocol (same weights,
prompts and threads; warm-up; interleaved order; per-prompt medians), one result JSON per method (samples JSONL
beside each, with each step's tree and drafted nodes), and the simulation check.

snakemake.input:   model (prepared checkpoint dir), prompts (the task's test prompts), heads (heads dirs, banks)
snakemake.params:  decoders {label: params} (greedy first), settings {max_new_tokens, batch_size}, bench
snakemake.output:  results (one JSON per label, in `decoders` order), check (simulation_check.json)
snakemake.wildcards: task
"""

from mtp_core.bench.prompt_sets import load_rule_model
from mtp_core.config.settings import config_hash
from mtp_core.io import log_to_file, read_jsonl
from mtp_core.papers.p5.jobs import decode_job
from mtp_core.papers.p5.plan import P5Plan

smk = snakemake
log_to_file(smk.log[0])
cfg = smk.config
loaded = load_rule_model(cfg, P5Plan(cfg).s.model, smk.input.get("model") or None)
bench = smk.params.bench
decode_job(
    loaded,
    list(read_jsonl(smk.input.prompts)),
    dict(smk.params.decoders),
    list(smk.output.results),
    smk.output.check,
    prompt_set=f"p5-{smk.wildcards.task}",
    scale=cfg["scale"],
    config_hash=config_hash(cfg),
    threads=bench["threads"],
    warmup=bench["warmup"],
    repeats=bench["repeats"],
    paper="p5",
    run=loaded.name,
    modeled=True,
    **smk.params.settings,
)
