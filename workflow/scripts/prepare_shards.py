"""Tokenize a `pretrain_text` dataset into token shards + index.json (`mtp_core.data.prepare_shards`).

snakemake.params: spec (the dataset's config entry), model (the tokenizer model's spec, with its name),
model_dir (its prepared checkpoint for gguf/tiny models, else None), seed, on_bad_row;
snakemake.input.rows: source rows only, the rows file (rendered as the tokenizer's model renders training rows:
its template, without a default system turn where its spec says `system_prompt: none`);
snakemake.output.index: the shard directory's index.json.
"""

import os
from pathlib import Path

from mtp_core.io import log_to_file

smk = snakemake
# the Rust tokenizer's thread pool follows the job's threads (set before tokenizers is imported)
os.environ["RAYON_NUM_THREADS"] = str(smk.threads)
os.environ["TOKENIZERS_PARALLELISM"] = "true" if smk.threads > 1 else "false"

from transformers import AutoTokenizer  # noqa: E402

from mtp_core.config.settings import checkpoint_location  # noqa: E402
from mtp_core.data import prepare_shards  # noqa: E402
from mtp_core.data.rows import resolve_template  # noqa: E402
from mtp_core.models.load import without_default_system  # noqa: E402

log_to_file(smk.log[0])
model = dict(smk.params.model)
where, kwargs = checkpoint_location(model, smk.params.model_dir)
tokenizer = AutoTokenizer.from_pretrained(where, **kwargs)
spec = dict(smk.params.spec)
rows = smk.input.get("rows")
if model.get("system_prompt", "default") == "none":
    without_default_system(tokenizer, model["name"])
template = resolve_template(spec.get("template", "auto"), bool(model.get("chat_template", True)))
prepare_shards(
    spec,
    tokenizer,
    Path(smk.output.index).parent,
    tokenizer_name=model["name"],
    seed=smk.params.seed,
    on_bad_row=smk.params.on_bad_row,
    rows=rows or None,
    template=template,
)
