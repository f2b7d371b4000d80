"""Materialise a gguf/tiny/scratch model as an HF checkpoint directory.

snakemake.params.spec: the model's config entry (with its name); snakemake.params.tokenizer: (location, kwargs) of
a scratch model's tokenizer model, else None; snakemake.output[0]: the directory.
"""

from mtp_core.io import log_to_file
from mtp_core.models.load import prepare_base_model

smk = snakemake
log_to_file(smk.log[0])
prepare_base_model(dict(smk.params.spec), smk.output[0], smk.params.tokenizer)
