# Paper 3: training-free multi-token prediction by embedding-space probing.
# Decoding jobs (one per model and method: greedy and the method at every block complexity a table or figure
# needs, side by side with the bench protocol), the hidden-state alignment analysis of Figure 2, Tables 1-2, the
# pruning ablation and Figures 2, 4 and 5. Every name comes from the paper's plan (`mtp_core.papers.p3.plan`).
#   snakemake -c2 results/tables/p3/table1.csv     one table (runs the decoding jobs it reads)
#   snakemake -c2 results/decode/p3/smollm2-135m/prompts-specbench/probing-bc30.json   one decoding job

P3 = paper_plan("p3")


# One job per (model, method): greedy and the method at every block complexity, side by side.
rule p3_decode:
    input:
        model=lambda wc: model_input(wc.model),
        prompts=prompt_file(P3.s.prompt_set),
    output:
        results=P3.decode_outputs(),
    params:
        decoders=with_wildcards(P3.job_decoders),
        prompt_set=P3.s.prompt_set,
        per_category=P3.s.per_category,
        settings={"max_new_tokens": P3.s.max_new_tokens, "batch_size": P3.s.batch_size},
        bench=P3.bench_settings(),
    wildcard_constraints:
        model=wildcard_choice(P3.s.models),
        method=wildcard_choice(P3.decode_methods()),
    log:
        f"{LOGS}/p3/decode/{{model}}/{{method}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/p3/decode/{{model}}/{{method}}.tsv"
    threads: bench_threads(P3.bench_settings())
    script:
        "../scripts/p3_decode.py"


# Figure 2's analysis: per layer, cosine similarity of mask-token and next-true-token hidden states.
rule p3_alignment:
    input:
        model=lambda wc: model_input(wc.model),
        prompts=prompt_file(P3.s.prompt_set),
    output:
        csv=P3.alignment_csv(),
        summary=f"{P3.analysis_dir('{model}')}/alignment.json",
    params:
        spec=P3.alignment(),
        per_category=P3.s.per_category,
        max_new_tokens=P3.s.max_new_tokens,
    wildcard_constraints:
        model=wildcard_choice([P3.s.figures.fig2.model]),
    log:
        f"{LOGS}/p3/alignment/{{model}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/p3/alignment/{{model}}.tsv"
    threads: config["threads"]
    script:
        "../scripts/p3_alignment.py"
