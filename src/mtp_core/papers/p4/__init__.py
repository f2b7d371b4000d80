"""Paper 4, "Direct Multi-Token Decoding": the late layers of a decoder
emit several tokens per cycle after one full-depth pass; trained with cyclical masking (§2.1), decoded with
cyclical KV refilling (§2.2), measured by the Percentage of Layers per Token (Eq. 7).

Modules: `cyclic` (the schedule: Eq. 3's mask, the decoding schedule, cycle offsets, PLT), `split` (the E/T/D split,
Eq. 4, the forward hooks that make the model's own forward compute Eqs. 1-5), `train` (the step, data and the
launcher method `p4`), `epochs` (the run length in epochs of the rows kept), `decoder` (the `dmtd` decoder),
`teacher_forced` (held-out quality per cycle offset), `speed` (random prompts, layer costs, modeled speed-up), `plan`
(config section -> runs, jobs, result files, table layouts), `checks` (the config's cross-references, before any
job), `jobs` (the workflow jobs' bodies), `report` (Tables 1-5, Figures 4-5, the leaderboard's τ choice).
"""

from ...config.registry import Method, Paper
from .plan import P4Plan

PAPER = Paper(
    name="p4",
    title="Direct multi-token decoding",
    plan=P4Plan,
    methods=(
        Method(
            "p4",
            "mtp_core.papers.p4.train:launch_entry",
            "mtp_core.papers.p4.settings:launch_check",
            "mtp_core.papers.p4.plan:P4Plan.resolve_training",
        ),
    ),
    decoders=("mtp_core.papers.p4.decoder",),
)
