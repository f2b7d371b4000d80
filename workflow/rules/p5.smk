# Paper 5: EntMTP, entropy-guided multi-token prediction trees. Disjoint test / calibration / training prompts per
# task, Medusa and Hydra++ heads trained by self-distillation on the model's own answers (launcher method `p5_heads`)
# or imported from a published checkpoint, the tree search (offline simulation at T 0, the paper's rollouts at T > 0),
# its debiasing, the throughput frontier (EntMTP*), the scheduler's bank, τ (EntMTPτ) and ladder (EntMTP-) and the
# regime analysis per (heads, task) on calibration prompts, one decoding job per task (Table 1's methods, bench
# protocol), Tables 1-2 and Figures 1-5. Every name comes from the paper's plan (`mtp_core.papers.p5.plan`).
#   snakemake -c2 results/tables/p5/table1.csv            Table 1 (trains the heads, searches, decodes)
#   snakemake -c2 results/analysis/p5/hydra/gsm8k/bank.json   the frontiers and banks of the hydra heads

P5 = paper_plan("p5")


rule p5_split:
    input:
        **P5.split_inputs(),
    output:
        **P5.split_outputs(),
        report=P5.SPLIT_REPORT,
    params:
        tasks=P5.section["tasks"],
        seed=P5.s.split_seed,
        prompt_format=P5.s.prompt_format,
        on_bad_row=config["on_bad_row"],
    log:
        f"{LOGS}/p5/split.log",
    benchmark:
        f"{RESULTS}/benchmarks/p5/split.tsv"
    priority: TRAINING_PATH_PRIORITY
    threads: 1
    script:
        "../scripts/p5_split.py"


# The model's greedy answers to every task's training prompts, with its hidden states (the heads' training data).
rule p5_selfdistill:
    input:
        model=model_input(P5.s.model),
        train=P5.split_files("train"),
    output:
        data=directory(P5.selfdistill_dir()),
    params:
        tasks=list(P5.s.tasks),
        settings=P5.section["selfdistill"],
    log:
        f"{LOGS}/p5/selfdistill.log",
    benchmark:
        f"{RESULTS}/benchmarks/p5/selfdistill.tsv"
    priority: TRAINING_PATH_PRIORITY
    threads: config["threads"]
    script:
        "../scripts/p5_selfdistill.py"


# Published heads (paper scale: ankner/hydra-vicuna-7b-v1.3, FasterDecoding/medusa-vicuna-7b-v1.3) in our format.
rule p5_import_heads:
    input:
        model=model_input(P5.s.model),
        stand_in=lambda wc: hub_mirror.inputs(config, P5.s.heads[wc.heads].path),
    output:
        heads=directory(P5.heads_dir("{heads}")),
    params:
        spec=lambda wc: P5.section["heads"][wc.heads],
    wildcard_constraints:
        heads=wildcard_choice(P5.imported_heads()),
    log:
        f"{LOGS}/p5/import/{{heads}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/p5/import/{{heads}}.tsv"
    threads: config["threads"]
    script:
        "../scripts/p5_import_heads.py"


# Per task, for one set of searched heads: calibration table, Algorithm 1 per depth cap, debiasing, prices and the
# throughput frontier, the bank with EntMTP*, S/B, τ and the ladder (chosen on the calibration prompts, in the
# decoding regime: the offline simulation at T 0, the paper's rollout engine at T > 0), the regime rows of App. A.
rule p5_frontier:
    input:
        model=model_input(P5.s.model),
        heads=with_wildcards(P5.heads_dir),
        calib=P5.split_files("calib"),
    output:
        P5.frontier_outputs(),
    params:
        settings=vars(P5.frontier_settings()),
        job=P5.frontier_job_settings(),
        tasks=list(P5.s.tasks),
        out_dirs=lambda wc: [P5.frontier_dir(wc.heads, t) for t in P5.s.tasks],
    wildcard_constraints:
        heads=wildcard_choice(P5.search_heads()),
    log:
        f"{LOGS}/p5/frontier/{{heads}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/p5/frontier/{{heads}}.tsv"
    threads: bench_threads(P5.bench_settings())
    script:
        "../scripts/p5_frontier.py"


# One task's decoding job: greedy and Table 1's methods side by side (bench protocol), one result per method, and the
# check that the simulation predicts every heads decoder's forwards on these prompts.
rule p5_decode:
    input:
        model=model_input(P5.s.model),
        prompts=lambda wc: P5.split_path(wc.task, "test"),
        heads=with_wildcards(P5.job_inputs),
    output:
        results=P5.decode_outputs(),
        check=P5.check_file(),
    params:
        decoders=with_wildcards(P5.job_decoders),
        settings=P5.decode_settings(),
        bench=P5.bench_settings(),
    wildcard_constraints:
        task=wildcard_choice(P5.decode_tasks()),
    log:
        f"{LOGS}/p5/decode/{{task}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/p5/decode/{{task}}.tsv"
    threads: bench_threads(P5.bench_settings())
    script:
        "../scripts/p5_decode.py"


# All five figures in one job (they read the same frontier files).
rule p5_figures:
    input:
        P5.figure_inputs(),
    output:
        [
            report(f, caption="../report/p5_figures.rst", category="Paper 5", subcategory="Figures")
            if f.endswith(".png")
            else f
            for name in P5.FIGURES
            for f in P5.target_files(name)
        ],
    params:
        heads=P5.figure_heads(),
        figures={f: P5.section["figures"][f] for f in P5.FIGURES},
        titles=P5.task_titles(),
    log:
        f"{LOGS}/figures/p5.log",
    benchmark:
        f"{RESULTS}/benchmarks/p5/figures.tsv"
    localrule: True
    script:
        "../scripts/p5_figures.py"
