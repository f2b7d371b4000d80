"""Build one prompt set and its report (`mtp_core.data.prepare_prompt_set`).

snakemake.params: name, spec (the prompt set's config entry), seed, on_bad_row; snakemake.input.math_test
(sources math and specbench; source jsonl reads spec.path, also the rule's input); snakemake.output: prompts, report.
"""

from mtp_core.data import prepare_prompt_set
from mtp_core.io import log_to_file

smk = snakemake
log_to_file(smk.log[0])
prepare_prompt_set(
    smk.params.name,
    dict(smk.params.spec),
    smk.output.prompts,
    smk.output.report,
    seed=smk.params.seed,
    on_bad_row=smk.params.on_bad_row,
    math_test=getattr(smk.input, "math_test", None),
)
