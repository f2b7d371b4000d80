"""Run every configured decoder on one prompt set with the bench protocol; one result JSON per decoder.

snakemake.input:   model (prepared checkpoint dir, absent for hub/local models), prompts (prompt-set JSONL)
snakemake.params:  decoders {name: params}, settings {max_new_tokens, batch_size}, bench {warmup, repeats, threads}
snakemake.output:  results (one JSON per decoder, in `decoders` order; samples JSONL beside each)
snakemake.wildcards: model, prompt_set
"""


import torch

from mtp_core.config import config_hash, model_spec
from mtp_core.decode_run import decode_prompt_set
from mtp_core.io import log_to_file, read_jsonl
from mtp_core.models import load_model

smk = snakemake  # noqa: F821  (injected by Snakemake)
log_to_file(smk.log[0])

rows = list(read_jsonl(smk.input.prompts))
loaded = load_model(
    model_spec(smk.config, smk.wildcards.model),
    base_dir=smk.input.get("model") or None,
    device="cuda" if torch.cuda.is_available() else "cpu",
)
decode_prompt_set(
    loaded,
    rows,
    decoders=dict(smk.params.decoders),
    outputs=list(smk.output.results),
    prompt_set=smk.wildcards.prompt_set,
    scale=smk.config["scale"],
    config_hash=config_hash(smk.config),
    threads=smk.params.bench["threads"],
    warmup=smk.params.bench["warmup"],
    repeats=smk.params.bench["repeats"],
    **smk.params.settings,
)
