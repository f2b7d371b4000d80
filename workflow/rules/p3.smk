# Paper 3: training-free multi-token prediction by embedding-space probing.
# Decoding jobs (one per model and method: greedy and the method at every block complexity a table or figure
# needs, side by side with the bench protocol), the hidden-state alignment analysis of Figure 2, Tables 1-2, the
# pruning ablation and Figures 2, 4 and 5. Every name comes from `mtp_core.papers.p3.plan` through the helpers
# in p3_helpers.smk.
#   snakemake -c2 results/tables/p3/table1.csv     one table (runs the decoding jobs it reads)
#   snakemake -c2 results/decode/p3/smollm2-135m/prompts-specbench/probing-bc30.json   one decoding job

include: "p3_helpers.smk"


# One job per (model, method): greedy and the method at every block complexity, side by side.
rule p3_decode:
    input:
        unpack(p3_decode_inputs),
    output:
        results=p3_decode_outputs(),
    params:
        decoders=lambda wc: p3plan.job_decoders(config, wc.model, wc.method),
        prompt_set=p3plan.prompt_set(config) if P3 else "",
        per_category=p3plan.section(config).get("per_category"),
        settings={k: p3plan.section(config).get(k) for k in ("max_new_tokens", "batch_size")},
        bench=p3plan.bench_settings(config),
    wildcard_constraints:
        model=wildcard_choice(p3plan.models(config) if P3 else []),
        method=wildcard_choice(p3_methods()),
    log:
        f"{LOGS}/p3/decode/{{model}}/{{method}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/p3/decode/{{model}}/{{method}}.tsv"
    threads: config["threads"]
    script:
        "../scripts/p3_decode.py"


# Figure 2's analysis: per layer, cosine similarity of mask-token and next-true-token hidden states.
rule p3_alignment:
    input:
        unpack(p3_alignment_inputs),
    output:
        csv=p3_alignment_csv("{model}"),
        summary=f"{RESULTS}/analysis/p3/{{model}}/alignment.json",
    params:
        spec=p3plan.figure_spec(config, p3plan.ALIGNMENT_FIGURE) if P3 else {},
        per_category=p3plan.section(config).get("per_category"),
        max_new_tokens=p3plan.section(config).get("max_new_tokens"),
    wildcard_constraints:
        model=wildcard_choice(p3plan.alignment_models(config)),
    log:
        f"{LOGS}/p3/alignment/{{model}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/p3/alignment/{{model}}.tsv"
    threads: config["threads"]
    script:
        "../scripts/p3_alignment.py"


rule p3_table:
    input:
        results=p3_experiment_inputs,
    output:
        csv=report(
            f"{RESULTS}/tables/p3/{{table}}.csv",
            caption="../report/p3_tables.rst",
            category="Paper 3",
            subcategory="Tables",
        ),
        md=f"{RESULTS}/tables/p3/{{table}}.md",
    params:
        spec=lambda wc: p3_experiment_params(wc.table),
    wildcard_constraints:
        table=wildcard_choice(p3plan.TABLES),
    log:
        f"{LOGS}/tables/p3_{{table}}.log",
    localrule: True
    script:
        "../scripts/p3_table.py"


rule p3_category_figure:
    input:
        results=p3_experiment_inputs,
    output:
        png=report(
            f"{RESULTS}/figures/p3/{{figure}}.png",
            caption="../report/p3_figures.rst",
            category="Paper 3",
            subcategory="Figures",
        ),
        pdf=f"{RESULTS}/figures/p3/{{figure}}.pdf",
    params:
        kind="category",
        figure=lambda wc: wc.figure,
        spec=lambda wc: p3_experiment_params(wc.figure),
    wildcard_constraints:
        figure=wildcard_choice(p3plan.CATEGORY_FIGURES),
    log:
        f"{LOGS}/figures/p3_{{figure}}.log",
    localrule: True
    script:
        "../scripts/p3_figure.py"


rule p3_alignment_figure:
    input:
        csv=p3_alignment_csv(p3plan.alignment_models(config)[0]) if P3 else [],
    output:
        png=report(
            f"{RESULTS}/figures/p3/fig2.png",
            caption="../report/p3_figures.rst",
            category="Paper 3",
            subcategory="Figures",
        ),
        pdf=f"{RESULTS}/figures/p3/fig2.pdf",
    params:
        kind="alignment",
        figure="fig2",
        spec=p3plan.figure_spec(config, p3plan.ALIGNMENT_FIGURE) if P3 else {},
    log:
        f"{LOGS}/figures/p3_fig2.log",
    localrule: True
    script:
        "../scripts/p3_figure.py"
