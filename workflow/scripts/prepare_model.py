"""Materialise a gguf/tiny model as an HF checkpoint directory.

snakemake.params.spec: the model's config entry (with its name); snakemake.output[0]: the directory.
"""

import logging
import sys

from mtp_core.models import prepare_base_model

smk = snakemake  # noqa: F821  (injected by Snakemake)
sys.stderr = open(smk.log[0], "w", buffering=1)
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
prepare_base_model(dict(smk.params.spec), smk.output[0])
