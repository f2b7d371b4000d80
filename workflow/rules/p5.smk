# Paper 5: EntMTP, entropy-guided multi-token prediction trees. Disjoint test / calibration / training prompts per
# task, Medusa and Hydra++ heads trained by self-distillation on the model's own answers (launcher method `p5_heads`)
# or imported from a published checkpoint, the tree search (offline simulation at T 0, the paper's rollouts at T > 0),
# its debiasing, the throughput frontier (EntMTP*), the scheduler's bank, τ (EntMTPτ) and ladder (EntMTP-) and the
# regime analysis per (heads, task) on calibration prompts, one decoding job per task (Table 1's methods, bench
# protocol), Tables 1-2 and Figures 1-5. Every name comes from `mtp_core.papers.p5.plan` through p5_helpers.smk.
#   snakemake -c2 results/tables/p5/table1.csv            Table 1 (trains the heads, searches, decodes)
#   snakemake -c2 results/analysis/p5/hydra/gsm8k/bank.json   the frontiers and banks of the hydra heads

include: "p5_helpers.smk"


rule p5_split:
    input:
        **p5_math_inputs(),
    output:
        **p5_split_outputs(),
        report=p5plan.SPLIT_REPORT,
    params:
        tasks=p5plan.tasks(config) if P5 else {},
        seed=p5plan.section(config).get("split_seed", 123),
        prompt_format=p5plan.section(config).get("prompt_format", "chat"),
        on_bad_row=config["on_bad_row"],
    log:
        f"{LOGS}/p5/split.log",
    benchmark:
        f"{RESULTS}/benchmarks/p5/split.tsv"
    threads: 1
    script:
        "../scripts/p5_split.py"


# The model's greedy answers to every task's training prompts, with its hidden states (the heads' training data).
rule p5_selfdistill:
    input:
        model=model_input(p5plan.model(config)) if P5 else [],
        train=[p5plan.split_path(t, "train") for t in p5_tasks()],
    output:
        data=directory(p5plan.selfdistill_dir(config) if P5 else f"{RESULTS}/data/p5/selfdistill/none"),
    params:
        tasks=p5_tasks(),
        settings=p5plan.section(config).get("selfdistill", {}),
    log:
        f"{LOGS}/p5/selfdistill.log",
    benchmark:
        f"{RESULTS}/benchmarks/p5/selfdistill.tsv"
    threads: config["threads"]
    script:
        "../scripts/p5_selfdistill.py"


# Heads trained through the submitit launcher (a local rule that submits and waits; see p1_train): declared outputs
# are the launcher's record and the heads, so the resumable states survive a killed job.
rule p5_train_heads:
    input:
        model=model_input(p5plan.model(config)) if P5 else [],
        data=p5plan.selfdistill_dir(config) if P5 else [],
    output:
        record=p5plan.heads_record("{heads}"),
        heads=directory(p5plan.heads_dir("{heads}")),
    params:
        settings=p5_heads_settings,
        run_dir=lambda wc: p5plan.heads_run_dir(wc.heads),
        python=PYTHON,
    wildcard_constraints:
        heads=wildcard_choice(p5_trained_heads()),
    log:
        f"{LOGS}/p5/train/{{heads}}.log",
    benchmark:  # wall clock of submit + wait (the training itself when local; its own cost: train.json.cost.json)
        f"{RESULTS}/benchmarks/p5/train/{{heads}}.tsv"
    localrule: True
    threads: training_threads(lambda wc: p5plan.launcher_settings(config, wc.heads))
    resources:
        submitit_jobs=1,
        launcher=p5_launcher,
    shell:
        "{params.python} -m mtp_core.cli train --method p5_heads --output {output.record} --run-dir {params.run_dir}"
        " --settings {params.settings} --launcher {resources.launcher} > {log} 2>&1"


# Published heads (paper scale: ankner/hydra-vicuna-7b-v1.3, FasterDecoding/medusa-vicuna-7b-v1.3) in our format.
rule p5_import_heads:
    input:
        model=model_input(p5plan.model(config)) if P5 else [],
        stand_in=lambda wc: hub_mirror.inputs(config, p5plan.heads_spec(config, wc.heads).get("path")),
    output:
        heads=directory(p5plan.heads_dir("{heads}")),
    params:
        spec=lambda wc: p5plan.heads_spec(config, wc.heads),
    wildcard_constraints:
        heads=wildcard_choice(p5_imported_heads()),
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
        unpack(p5_frontier_inputs),
    output:
        p5_frontier_outputs(),
    params:
        settings=lambda wc: vars(p5plan.frontier_settings(config)),
        job=p5plan.frontier_job_settings(config) if P5 else {},
        tasks=p5_tasks(),
        out_dirs=lambda wc: [p5plan.analysis_dir(wc.heads, t) for t in p5_tasks()],
    wildcard_constraints:
        heads=wildcard_choice(p5plan.search_heads(config) if P5 else []),
    log:
        f"{LOGS}/p5/frontier/{{heads}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/p5/frontier/{{heads}}.tsv"
    threads: config["threads"]
    script:
        "../scripts/p5_frontier.py"


# One task's decoding job: greedy and Table 1's methods side by side (bench protocol), one result per method, and the
# check that the simulation predicts every heads decoder's forwards on these prompts.
rule p5_decode:
    input:
        unpack(p5_decode_inputs),
    output:
        results=p5_decode_outputs(),
        check=p5_check_file("{task}"),
    params:
        decoders=lambda wc: p5plan.job_decoders(config, wc.task),
        settings=p5plan.decode_settings(config) if P5 else {},
        bench=p5plan.bench_settings(config) if P5 else {},
    wildcard_constraints:
        task=wildcard_choice(p5plan.decode_tasks(config) if P5 else []),
    log:
        f"{LOGS}/p5/decode/{{task}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/p5/decode/{{task}}.tsv"
    threads: config["threads"]
    script:
        "../scripts/p5_decode.py"


rule p5_table:
    input:
        p5_table_inputs,
    output:
        csv=report(
            f"{RESULTS}/tables/p5/{{table}}.csv",
            caption="../report/p5_tables.rst",
            category="Paper 5",
            subcategory="Tables",
        ),
        md=f"{RESULTS}/tables/p5/{{table}}.md",
    params:
        name=lambda wc: wc.table,
        rows=p5plan.table1_rows(config) if P5 else [],
        checks={t: p5_check_file(t) for t in (p5plan.decode_tasks(config) if P5 else [])},
        table2=p5plan.table_spec(config, "table2") if P5 else {},
        table2_heads=p5plan.table2_heads(config) if P5 else "",
        titles={t: p5plan.task_title(config, t) for t in p5_tasks()},
    wildcard_constraints:
        table=wildcard_choice(p5plan.TABLES),
    log:
        f"{LOGS}/tables/p5_{{table}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/p5/table/{{table}}.tsv"
    localrule: True
    script:
        "../scripts/p5_table.py"


# All five figures in one job (they read the same frontier files).
rule p5_figures:
    input:
        p5plan.figure_inputs(config) if P5 else [],
    output:
        [
            report(f, caption="../report/p5_figures.rst", category="Paper 5", subcategory="Figures")
            if f.endswith(".png")
            else f
            for name in p5plan.FIGURES
            for f in p5plan.target_files(name)
        ],
    params:
        heads=p5plan.figure_heads(config) if P5 else "",
        figures={f: p5plan.figure_spec(config, f) for f in p5plan.FIGURES} if P5 else {},
        titles={t: p5plan.task_title(config, t) for t in p5_tasks()},
    log:
        f"{LOGS}/figures/p5.log",
    benchmark:
        f"{RESULTS}/benchmarks/p5/figures.tsv"
    localrule: True
    script:
        "../scripts/p5_figures.py"
