"""Write a math dataset's train / validation / test JSONL and split report (`mtp_core.data.prepare_math`).

snakemake.params: spec (the dataset's config entry), seed, on_bad_row; snakemake.output: train, validation,
test, report (all in one directory).
"""

from pathlib import Path

from mtp_core.data import prepare_math
from mtp_core.io import log_to_file

smk = snakemake
log_to_file(smk.log[0])
out_dir = Path(smk.output.report).parent
prepare_math(dict(smk.params.spec), out_dir, seed=smk.params.seed, on_bad_row=smk.params.on_bad_row)
