"""Paper 1, "Multi-Token Prediction via Self-Distillation": a next-token
model becomes a multi-token one with a `<MTP>` mask token and the student-forced online loss, decoded with
Static k and ConfAdapt(τ).

Modules: `plan` (config section -> runs, evaluation jobs, result files, checks), `mask_token` (§4.1), `masks`
(blocked regions, §4.2-4.4), `losses` (§3.3), `train` (step, batches, the launcher method `p1`), `decoders`
(`static-k`, `conf-adapt`, §4.5-4.6), `confidence` (Figure 6), `report` (Tables 1-5, Figures 5-11).
"""

from ...config.registry import Method, Paper
from .plan import P1Plan

PAPER = Paper(
    name="p1",
    title="MTP via self-distillation",
    plan=P1Plan,
    methods=(
        Method(
            "p1",
            "mtp_core.papers.p1.train:launch_entry",
            "mtp_core.papers.p1.settings:launch_check",
            "mtp_core.papers.p1.plan:P1Plan.resolve_training",
        ),
    ),
    decoders=("mtp_core.papers.p1.decoders",),
)
