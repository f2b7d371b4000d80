"""Paper 4: the leaderboard's τ choice (`mtp_core.papers.p4.report.select_tau`): the fastest τ of the speed job whose
teacher-forced retention on the held-out split reaches the threshold; written as `{"params": {"tau": ...}, ...}`,
which the leaderboard job merges into the row's decoder parameters.

snakemake.params.spec  vanilla (its teacher-forced result), tf ({τ: file}), speed ({τ: file}), threshold
snakemake.output[0]    selected_tau.json
"""

from mtp_core.io import log_to_file
from mtp_core.papers.p4.report import choose_tau

smk = snakemake
log_to_file(smk.log[0])
spec = dict(smk.params.spec)
choose_tau(
    spec["vanilla"],
    {int(t): f for t, f in spec["tf"].items()},
    {int(t): f for t, f in spec["speed"].items()},
    float(spec["threshold"]),
    smk.output[0],
)
