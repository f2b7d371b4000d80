"""Paper 5, "EntMTP: Accelerating LLM Inference with Entropy Guided Multi Token Prediction": task-specific draft
trees for Medusa / Hydra heads, found offline (greedy acceptance frontier, debiasing, throughput frontier: EntMTP*)
and switched at run time by an entropy / path-value scheduler (EntMTPτ, EntMTP-).

Modules: `plan` (config section -> jobs, result paths: `P5Plan`), `checks` (its config checks before any job),
`settings` (the config section's and the training's settings), `splits` (disjoint test / calibration / training
prompts per task), `capture` (greedy continuations with hidden states), `selfdistill` and `train` (the heads'
self-distillation data and training, launcher method `p5_heads`), `drafting` and `decoders` (`medusa`, `hydra`,
`entmtp` on the tree core), `bank` (trees by id, the topology bank), `scheduler` (path-value score, policies),
`calibration` (rank tables), `frontier` (exact simulation at T = 0, Algorithm 1, debiasing), `engines` (what the
pipeline asks of an engine; the offline one), `throughput` (prices, throughput frontier, τ and ladder sweeps),
`rollout` (the paper's union-tree rollout engine, T > 0), `regimes`
(App. A), `stages` (the offline pipeline per task), `import_heads` (published checkpoints), `report` (Tables 1-2,
Figures 1-5). The heads themselves are the core's (`mtp_core.models.heads.medusa`, `mtp_core.models.heads.hydra`).
"""

from ...config.registry import Method, Paper
from .plan import P5Plan

PAPER = Paper(
    name="p5",
    title="EntMTP",
    plan=P5Plan,
    methods=(
        Method(
            "p5_heads",
            "mtp_core.papers.p5.train:launch_entry",
            "mtp_core.papers.p5.settings:launch_check",
            "mtp_core.papers.p5.plan:P5Plan.resolve_training",
        ),
    ),
    decoders=("mtp_core.papers.p5.decoders",),
    commands=("mtp_core.papers.p5.cli",),
)
