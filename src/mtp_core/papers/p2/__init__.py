"""Paper 2, "Self-Distillation for Multi-Token Prediction" (MTP-D):
DeepSeek-style cascaded MTP heads (`mtp_core.models.heads.deepseek`) trained with CE plus a gradient-detached Top-N KL
from the main head, extended by looping, and decoded by main-head-constrained speculative decoding (Algorithm 1)
with AR / CAR per head.

Modules: `plan` (`P2Plan`: config section -> runs, mains, settings, jobs, result files), `experiments` (its tables,
figures, speed experiments: what they show and read), `checks` (its config check), `losses` (Eqs. 1-5, 8-10, App. E.2.2),
`data` (shard windows, the feature cache), `train` (the model, step and launcher method `p2`), `decoder`
(`mtp-spec`, App. D), `uncached` (decoding without a KV cache, App. D's timing protocol), `acceptance` (the
teacher-forced simulation, Eqs. 6-7), `evaluate` (references, acceptance and validation jobs, Top-N mass), `speed`
(bench rows, modeled speed), `report` (Tables 1-8), `figures` (Figures 3-14).
"""

from ...config.registry import Method, Paper
from .plan import P2Plan

PAPER = Paper(
    name="p2",
    title="MTP-D",
    plan=P2Plan,
    methods=(
        Method(
            "p2",
            "mtp_core.papers.p2.train:launch_entry",
            "mtp_core.papers.p2.settings:launch_check",
            "mtp_core.papers.p2.plan:P2Plan.resolve_training",
        ),
    ),
    decoders=("mtp_core.papers.p2.decoder", "mtp_core.papers.p2.uncached"),
)
