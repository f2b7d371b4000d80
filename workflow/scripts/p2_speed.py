"""Paper 2: one speed experiment (Fig. 4, Fig. 5 or Table 8): greedy and its `mtp-spec` rows side by side with the
bench protocol, under each decoding protocol (with and without a KV cache), plus the speedup vs the baseline row,
the decoded head counters and the modeled speed (`mtp_core.papers.p2.speed`).

snakemake.input:   models (the rows' trunks), prompts (one file per prompt set), runs (the rows' exports)
snakemake.params:  experiment, trunks {label: main}, decoders {label: params} (per protocol: greedy of each trunk, then
                   the mtp-spec rows), refs {label: {greedy, baseline, kv_cache}}, prompt_sets,
                   speed (papers.p2.speed), bench {warmup, repeats, threads}
snakemake.output:  results (one JSON per decoder, in decoders order)
"""

from mtp_core.config.settings import config_hash
from mtp_core.io import log_to_file
from mtp_core.papers.p2.jobs import load_main, prompt_rows
from mtp_core.papers.p2.speed import speed_job

smk = snakemake
log_to_file(smk.log[0])
speed = smk.params.speed
sets = {ps: speed["per_set"] for ps in smk.params.prompt_sets}
rows = [{**r, "category": ps} for ps, rs in prompt_rows(smk.input.prompts, sets, single_turn=True).items() for r in rs]
decoders = dict(smk.params.decoders)
by_main = {m: load_main(smk.config, m) for m in dict.fromkeys(smk.params.trunks.values())}
speed_job(
    {label: by_main[m] for label, m in smk.params.trunks.items()},
    rows,
    decoders,
    list(smk.output.results),
    dict(smk.params.refs),
    max_new_tokens=speed["max_new_tokens"],
    batch_size=speed["batch_size"],
    bench=dict(smk.params.bench),
    modeled=speed["modeled"],
    scale=smk.config["scale"],
    config_hash=config_hash(smk.config),
)
