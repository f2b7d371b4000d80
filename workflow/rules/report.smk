# Tables and figures of the foundation runs, registered in the Snakemake report. Local rules, as every paper's
# tables and figures: seconds of pandas and matplotlib, not worth a cluster job.


rule decoding_table:
    input:
        results=decode_prompts_results(),
    output:
        csv=report(
            f"{RESULTS}/tables/base/decoding.csv", caption="../report/decoding_table.rst", category="Foundation"
        ),
        md=f"{RESULTS}/tables/base/decoding.md",
    params:
        table="decoding",
    log:
        f"{LOGS}/tables/base_decoding.log",
    localrule: True
    script:
        "../scripts/make_tables.py"


rule evaluation_table:
    input:
        results=evaluation_results(),
    output:
        csv=report(
            f"{RESULTS}/tables/base/evaluation.csv",
            caption="../report/evaluation_table.rst",
            category="Foundation",
        ),
        md=f"{RESULTS}/tables/base/evaluation.md",
    params:
        table="evaluation",
    log:
        f"{LOGS}/tables/base_evaluation.log",
    localrule: True
    script:
        "../scripts/make_tables.py"


rule decoding_speed_figure:
    input:
        results=decode_prompts_results(),
    output:
        png=report(
            f"{RESULTS}/figures/base/decoding_speed.png",
            caption="../report/decoding_speed.rst",
            category="Foundation",
        ),
        pdf=f"{RESULTS}/figures/base/decoding_speed.pdf",
    params:
        figure="decoding_speed",
    log:
        f"{LOGS}/figures/base_decoding_speed.log",
    localrule: True
    script:
        "../scripts/make_figures.py"
