# The leaderboard (mtp_core.bench.leaderboard.plan; README "The leaderboard"): greedy, the training-free baselines and every
# enabled paper's rows on one base model and the same prompt sets, side by side with the bench protocol; a table
# and a speed-vs-quality figure. Rows, result files and settings come from `mtp_core.bench.leaderboard.plan`.
#   snakemake -c2 results/tables/leaderboard.csv
#   snakemake -c2 results/decode/leaderboard/smollm2-135m-math/prompts-math/greedy.json    one prompt set's job

import mtp_core.bench.leaderboard.plan as lb

LB = lb.enabled(config)  # checked before any job (common.smk: validation.check_references -> leaderboard.check)
LB_ROWS = lb.job_rows(config) if LB else []


# One job per prompt set: every row on the same prompts, interleaved (bench protocol), one result per row. Inputs:
# the model, the prompt set and every trained checkpoint or file a row runs on (the papers' rules make them).
rule leaderboard_decode:
    input:
        model=model_input(lb.model(config)) if LB else [],
        prompts=lambda wc: prompt_file(wc.prompt_set),
        rows=lb.row_inputs(config) if LB else [],
    output:
        results=[lb.result_path(config, "{prompt_set}", r["label"]) for r in LB_ROWS],
    params:
        rows=LB_ROWS,
        model=lb.model(config) if LB else "",
        n=lambda wc: lb.prompt_sets(config)[wc.prompt_set]["n"],
        max_new_tokens=lambda wc: lb.prompt_sets(config)[wc.prompt_set]["max_new_tokens"],
        batch_size=lb.section(config).get("batch_size", 1),
        bench=lb.bench_settings(config),
    wildcard_constraints:
        prompt_set=wildcard_choice(lb.prompt_sets(config) if LB else []),
    log:
        f"{LOGS}/leaderboard/decode/{{prompt_set}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/leaderboard/decode/{{prompt_set}}.tsv"
    threads: bench_threads(lb.bench_settings(config)) if LB else 1
    script:
        "../scripts/leaderboard_decode.py"


rule leaderboard_table:
    input:
        results=lb.all_results(config) if LB else [],
    output:
        csv=report(f"{RESULTS}/tables/leaderboard.csv", caption="../report/leaderboard.rst", category="Leaderboard"),
        md=f"{RESULTS}/tables/leaderboard.md",
    params:
        rows=LB_ROWS,
        kind="table",
    log:
        f"{LOGS}/tables/leaderboard.log",
    localrule: True
    script:
        "../scripts/leaderboard_report.py"


rule leaderboard_figure:
    input:
        results=lb.all_results(config) if LB else [],
    output:
        png=report(f"{RESULTS}/figures/leaderboard.png", caption="../report/leaderboard.rst", category="Leaderboard"),
        pdf=f"{RESULTS}/figures/leaderboard.pdf",
    params:
        rows=LB_ROWS,
        kind="figure",
    log:
        f"{LOGS}/figures/leaderboard.log",
    localrule: True
    script:
        "../scripts/leaderboard_report.py"
