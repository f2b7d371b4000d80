"""Paper 4, Table 3 / Figure 4: the speed job (`mtp_core.papers.p4.jobs.speed_job`) on the run's weights: random
prompts, no stop criteria, greedy and dmtd at each τ side by side per batch size (bench protocol), and the measured
layer costs behind the modeled speed-up.

snakemake.input.weights  the run's trained model
snakemake.params.spec    run, spec (papers.p4.speed), settings, outputs ({batch: [files]}), layer_costs ({batch:
                         file}), bench (warmup, repeats, threads)
"""

from mtp_core.bench.prompt_sets import load_rule_model
from mtp_core.io import log_to_file
from mtp_core.papers.p4.jobs import speed_job
from mtp_core.papers.p4.plan import P4Plan

smk = snakemake
log_to_file(smk.log[0])
spec = dict(smk.params.spec)
loaded = load_rule_model(smk.config, P4Plan(smk.config).run_plan(spec["run"]).model, None, smk.input.weights)
speed_job(
    smk.config,
    loaded,
    run=spec["run"],
    spec=spec["spec"],
    settings=spec["settings"],
    outputs={int(b): files for b, files in spec["outputs"].items()},
    layer_costs={int(b): f for b, f in spec["layer_costs"].items()},
    bench=spec["bench"],
)
