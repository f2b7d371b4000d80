"""Paper 5: the frontier pipeline of one set of heads on every task: calibration table, search, debiasing, prices,
throughput frontier, bank (EntMTP*, S/B, τ and the ladder chosen on the calibration prompts), regimes
(`jobs.frontier_job`; the model loads once and the verification is priced once), on the engine of the decoding
regime (offline simulation at T 0, the paper's rollouts at T > 0: `P5Plan.search_engine`).

snakemake.input:   model (prepared checkpoint dir), heads (heads dir), calib (calibration prompts per task)
snakemake.params:  settings (FrontierSettings fields), job {calibration, max_prompt_tokens, max_rows, threads,
                   engine, decode}, tasks, out_dirs (per task)
snakemake.output:  every task's frontier files (table.npz/json, search, self, throughput, bank, regimes json/csv)
snakemake.wildcards: heads
"""

from mtp_core.bench.prompt_sets import load_rule_model
from mtp_core.io import log_to_file
from mtp_core.papers.p5.jobs import frontier_job
from mtp_core.papers.p5.plan import P5Plan
from mtp_core.papers.p5.settings import FrontierSettings

smk = snakemake
log_to_file(smk.log[0])
cfg = smk.config
loaded = load_rule_model(cfg, P5Plan(cfg).s.model, smk.input.get("model") or None)
settings = FrontierSettings(**dict(smk.params.settings))
prices = None
for task, calib, out_dir in zip(smk.params.tasks, smk.input.calib, smk.params.out_dirs):
    meta = {"heads": smk.wildcards.heads, "task": task, "model": loaded.name, "scale": cfg["scale"]}
    prices = frontier_job(loaded, smk.input.heads, calib, out_dir, settings, dict(smk.params.job), meta, prices)
