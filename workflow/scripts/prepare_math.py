"""Write a math dataset's train / validation / test JSONL and split report (`mtp_core.data.prepare_math`).

snakemake.params: spec (the dataset's config entry), seed, on_bad_row; snakemake.output: train, validation,
test, report (all in one directory).
"""

import logging
import sys
from pathlib import Path

from mtp_core.data import prepare_math

smk = snakemake  # noqa: F821  (injected by Snakemake)
sys.stderr = open(smk.log[0], "w", buffering=1)
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
out_dir = Path(smk.output.report).parent
prepare_math(dict(smk.params.spec), out_dir, seed=smk.params.seed, on_bad_row=smk.params.on_bad_row)
