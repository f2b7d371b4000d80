"""Paper 5: one (heads, task) offline pipeline: calibration table, search, debiasing, prices, throughput frontier,
bank (EntMTP*, S/B, τ chosen on the calibration prompts), regimes (`mtp_core.papers.p5.jobs.frontier_job`).

snakemake.input:   model (prepared checkpoint dir), heads (heads dir), calib (calibration prompts)
snakemake.params:  settings (FrontierSettings fields), job {calibration, max_prompt_tokens, max_rows}, out_dir
snakemake.output:  the frontier files (table.npz/json, search, self, throughput, bank, regimes json/csv)
snakemake.wildcards: heads, task
"""

from mtp_core.decode_run import load_rule_model
from mtp_core.io import log_to_file
from mtp_core.papers.p5 import plan
from mtp_core.papers.p5.jobs import frontier_job
from mtp_core.papers.p5.stages import FrontierSettings

smk = snakemake
log_to_file(smk.log[0])
cfg = smk.config
loaded = load_rule_model(cfg, plan.model(cfg), smk.input.get("model") or None)
frontier_job(
    loaded,
    smk.input.heads,
    smk.input.calib,
    smk.params.out_dir,
    FrontierSettings(**dict(smk.params.settings)),
    dict(smk.params.job),
    {"heads": smk.wildcards.heads, "task": smk.wildcards.task, "model": loaded.name, "scale": cfg["scale"]},
)
