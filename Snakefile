# mtp-repro: every table and figure of the enabled papers, at the scale of the chosen config.
#   snakemake -c all all                                  embedded scale (config.yaml)
#   snakemake -c all all --configfile config/tiny.yaml     tiny scale (minutes)
#   snakemake --profile slurm all                          paper scale on a Slurm cluster
from snakemake.utils import min_version

min_version("9.0")


# The default scale. A `--configfile` on the command line (or in a profile) replaces it instead of being
# deep-merged into it, so that models and datasets of another scale never leak into this one.
if not workflow.overwrite_configfiles:

    configfile: "config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/hub_mirror.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/decode.smk"
# each enabled paper's rules (mtp_core.config.registry: a paper named pN has its rules in workflow/rules/pN.smk)
for _paper in enabled_papers():

    include: f"workflow/rules/{_paper.name}.smk"


include: "workflow/rules/papers.smk"

include: "workflow/rules/leaderboard.smk"
include: "workflow/rules/report.smk"


rule all:
    input:
        all_targets(),
    default_target: True
