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
include: "workflow/rules/p1.smk"
include: "workflow/rules/p2.smk"
include: "workflow/rules/p3.smk"
include: "workflow/rules/p4.smk"
include: "workflow/rules/p5.smk"
include: "workflow/rules/leaderboard.smk"
include: "workflow/rules/report.smk"


rule all:
    input:
        all_targets(),
    default_target: True
