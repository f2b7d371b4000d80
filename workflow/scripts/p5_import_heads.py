"""Paper 5: published Medusa / Hydra heads (hub id or local directory) converted into the one save format.

snakemake.input:   model (prepared checkpoint dir, absent for hub models)
snakemake.params:  spec (papers.p5.heads.<name>: source, id | path)
snakemake.output:  heads (directory)
"""

from mtp_core.bench.prompt_sets import load_rule_model
from mtp_core.io import log_to_file
from mtp_core.papers.p5.import_heads import import_heads
from mtp_core.papers.p5.plan import P5Plan

smk = snakemake
log_to_file(smk.log[0])
loaded = load_rule_model(smk.config, P5Plan(smk.config).s.model, smk.input.get("model") or None)
import_heads(dict(smk.params.spec), loaded.model, smk.output.heads, loaded.name)
