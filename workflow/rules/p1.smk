# Paper 1: MTP via self-distillation. Training runs (main recipe and the
# ablations of Tables 3-5), the decoding sweep (Static k, ConfAdapt tau) of every final student and of the
# training-dynamics exports, the step-0 baseline, the confidence analysis of Figure 6, Tables 1-5 and
# Figures 5-11. Every name comes from `mtp_core.papers.p1.plan` through the helpers in
# p1_helpers.smk.
#   snakemake -c2 results/tables/p1/table4.csv     one table (trains and evaluates the runs it shows)
#   snakemake -c2 p1_bda                           one ablation run: training + every evaluation it is in

include: "p1_helpers.smk"


# Training runs through the submitit launcher (`mtp_core.train.launch`, cluster from config `launcher`): a local
# rule that submits the job and waits, so its `benchmark:` times the wait (the training itself when local); the
# launcher records the job's own cost in train.json.cost.json. Declared outputs are only the launcher's record and the final model:
# Snakemake deletes the outputs of a killed job, and the resumable states (checkpoints/), the step exports
# (exports/) and train.json.job.json (which the launcher re-attaches to after a restart) must survive.
rule p1_train:
    input:
        unpack(p1_train_inputs),
    output:
        record=p1_train_record("{run}"),
        model=directory(p1_final_model("{run}")),
    params:
        settings=p1_train_settings,
        run_dir=lambda wc: p1_run_dir(wc.run),
        python=PYTHON,
    wildcard_constraints:
        run=wildcard_choice(p1_runs()),
    log:
        f"{LOGS}/p1/train/{{run}}.log",
    benchmark:  # wall clock of submit + wait (the training itself when local; its own cost: train.json.cost.json)
        f"{RESULTS}/benchmarks/p1/train/{{run}}.tsv"
    localrule: True
    threads: training_threads(lambda wc: p1plan.launcher_settings(config, wc.run))
    resources:
        submitit_jobs=1,
        launcher=p1_launcher,
    shell:
        "{params.python} -m mtp_core.cli train --method p1 --output {output.record} --run-dir {params.run_dir}"
        " --settings {params.settings} --launcher {resources.launcher} > {log} 2>&1"


rule p1_evaluate:
    input:
        unpack(p1_eval_inputs),
    output:
        results=expand(p1plan.result_path("{{run}}", "{{task}}", "{label}"), label=list(P1_SWEEP)),
    params:
        model=lambda wc: p1plan.run_plan(config, wc.run).model,
        task=lambda wc: wc.task,
        run=lambda wc: wc.run,
        decoders=P1_SWEEP,
        settings=lambda wc: p1plan.eval_settings(config, wc.task),
        dtype=p1plan.eval_dtype(config) if P1 else None,
        checkpoint=lambda wc: p1_final_model(wc.run),
    wildcard_constraints:
        run=wildcard_choice(sorted({j.label for j in p1_jobs("final")})),
        task=wildcard_choice(sorted({j.task for j in p1_jobs("final")})),
    log:
        f"{LOGS}/p1/evaluate/{{run}}/{{task}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/p1/evaluate/{{run}}/{{task}}.tsv"
    threads: config["threads"]
    script:
        "../scripts/p1_evaluate.py"


rule p1_evaluate_checkpoint:
    input:
        unpack(p1_checkpoint_inputs),
    output:
        results=expand(
            p1plan.result_path("{{run}}@step{{step}}", "{{task}}", "{label}"), label=list(P1_CHECKPOINT_SWEEP)
        ),
    params:
        model=lambda wc: p1plan.run_plan(config, wc.run).model,
        task=lambda wc: wc.task,
        run=lambda wc: p1plan.checkpoint_label(wc.run, wc.step),
        decoders=P1_CHECKPOINT_SWEEP,
        settings=lambda wc: p1plan.eval_settings(config, wc.task),
        dtype=p1plan.eval_dtype(config) if P1 else None,
        checkpoint=lambda wc: p1_export_dir(wc.run, wc.step),
    wildcard_constraints:
        run=wildcard_choice(sorted({j.run for j in p1_jobs("checkpoint")})),
        step=r"\d+",
        task=wildcard_choice(sorted({j.task for j in p1_jobs("checkpoint")})),
    log:
        f"{LOGS}/p1/evaluate/{{run}}@step{{step}}/{{task}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/p1/evaluate/{{run}}@step{{step}}/{{task}}.tsv"
    threads: config["threads"]
    script:
        "../scripts/p1_evaluate.py"


# "Baseline Step 0, k=1": the base model with greedy decoding. When the foundation already evaluated the same
# model on the same task with the same settings, its result is relabelled instead of decoded again.
rule p1_baseline:
    input:
        unpack(p1_baseline_inputs),
    output:
        result=p1plan.result_path("{model}@step0", "{task}", p1plan.BASELINE_DECODER),
    params:
        model=lambda wc: wc.model,
        task=lambda wc: wc.task,
        run=lambda wc: p1plan.baseline_label(wc.model),
        settings=lambda wc: p1plan.eval_settings(config, wc.task),
        dtype=p1plan.eval_dtype(config) if P1 else None,
    wildcard_constraints:
        model=wildcard_choice(sorted({j.run for j in p1_jobs("baseline")})),
        task=wildcard_choice(sorted({j.task for j in p1_jobs("baseline")})),
    log:
        f"{LOGS}/p1/baseline/{{model}}/{{task}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/p1/baseline/{{model}}/{{task}}.tsv"
    threads: config["threads"]
    script:
        "../scripts/p1_baseline.py"


# Figure 6: the student's confidence in its own k-token rollouts vs the teacher's loss on them (validation).
rule p1_confidence:
    input:
        unpack(p1_confidence_inputs),
    output:
        csv=p1_confidence_csv("{run}"),
        summary=f"{RESULTS}/analysis/p1/{{run}}/confidence.json",
    params:
        model=lambda wc: p1plan.run_plan(config, wc.run).model,
        method=lambda wc: p1plan.run_plan(config, wc.run).method,
        spec=p1plan.figure_spec(config, "fig6") if P1 else {},
        mask_seed=p1plan.section(config).get("mask_seed", 0),
        on_bad_row=lambda wc: dataset_on_bad_row(p1plan.run_plan(config, wc.run).dataset),
    wildcard_constraints:
        run=wildcard_choice([p1plan.figure_spec(config, "fig6")["run"]] if P1 else []),
    log:
        f"{LOGS}/p1/confidence/{{run}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/p1/confidence/{{run}}.tsv"
    threads: config["threads"]
    script:
        "../scripts/p1_confidence.py"


rule p1_table:
    input:
        results=p1_table_inputs,
    output:
        csv=report(
            f"{RESULTS}/tables/p1/{{table}}.csv",
            caption="../report/p1_tables.rst",
            category="Paper 1",
            subcategory="Tables",
        ),
        md=f"{RESULTS}/tables/p1/{{table}}.md",
    params:
        spec=lambda wc: p1_table_params(wc.table),
    wildcard_constraints:
        table=wildcard_choice(p1plan.TABLES),
    log:
        f"{LOGS}/tables/p1_{{table}}.log",
    localrule: True
    script:
        "../scripts/p1_table.py"


rule p1_pareto_figure:
    input:
        results=p1_figure_inputs,
    output:
        png=report(
            f"{RESULTS}/figures/p1/{{figure}}.png",
            caption="../report/p1_figures.rst",
            category="Paper 1",
            subcategory="Figures",
        ),
        pdf=f"{RESULTS}/figures/p1/{{figure}}.pdf",
    params:
        kind="pareto",
        figure=lambda wc: wc.figure,
        spec=lambda wc: p1_figure_params(wc.figure),
    wildcard_constraints:
        figure=wildcard_choice(p1plan.PARETO_FIGURES),
    log:
        f"{LOGS}/figures/p1_{{figure}}.log",
    localrule: True
    script:
        "../scripts/p1_figure.py"


rule p1_dynamics_figure:
    input:
        results=p1_figure_inputs,
    output:
        png=report(
            f"{RESULTS}/figures/p1/{{figure}}.png",
            caption="../report/p1_figures.rst",
            category="Paper 1",
            subcategory="Figures",
        ),
        pdf=f"{RESULTS}/figures/p1/{{figure}}.pdf",
    params:
        kind="dynamics",
        figure=lambda wc: wc.figure,
        spec=lambda wc: p1_figure_params(wc.figure),
    wildcard_constraints:
        figure=wildcard_choice(p1plan.DYNAMICS_FIGURES),
    log:
        f"{LOGS}/figures/p1_{{figure}}.log",
    localrule: True
    script:
        "../scripts/p1_figure.py"


rule p1_confidence_figure:
    input:
        csv=p1_confidence_csv(p1plan.figure_spec(config, "fig6")["run"]) if P1 else [],
    output:
        png=report(
            f"{RESULTS}/figures/p1/fig6.png",
            caption="../report/p1_figures.rst",
            category="Paper 1",
            subcategory="Figures",
        ),
        pdf=f"{RESULTS}/figures/p1/fig6.pdf",
    params:
        kind="confidence",
        figure="fig6",
        spec=p1plan.figure_spec(config, "fig6") if P1 else {},
    log:
        f"{LOGS}/figures/p1_fig6.log",
    localrule: True
    script:
        "../scripts/p1_figure.py"


# One named target per run, e.g. `snakemake -c2 p1_gt_supervision`: its training and every evaluation of it
# that a table or figure reads.
for _run in p1_runs():

    rule:
        name:
            f"p1_{_run}"
        input:
            p1_run_results(_run),
        localrule: True
