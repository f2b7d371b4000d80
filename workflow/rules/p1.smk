# Paper 1: MTP via self-distillation. Training runs (main recipe and the
# ablations of Tables 3-5), the decoding sweep (Static k, ConfAdapt tau) of every final student and of the
# training-dynamics exports, the step-0 baseline, the confidence analysis of Figure 6, Tables 1-5 and
# Figures 5-11. Every name comes from the paper's plan (`mtp_core.papers.p1.plan`).
#   snakemake -c2 results/tables/p1/table4.csv     one table (trains and evaluates the runs it shows)
#   snakemake -c2 p1_bda                           one ablation run: training + every evaluation it is in

P1 = paper_plan("p1")


rule p1_evaluate:
    input:
        unpack(lambda wc: task_inputs(wc.task)),
        checkpoint=lambda wc: P1.final_model(wc.run),
    output:
        results=P1.job_results("{run}", "{task}", "final"),
    params:
        model=lambda wc: P1.run(wc.run).model,
        task=lambda wc: wc.task,
        run=lambda wc: wc.run,
        decoders=P1.sweep(),
        settings=lambda wc: P1.eval_settings(wc.task),
        dtype=P1.s.evaluation["dtype"],
        checkpoint=lambda wc: P1.final_model(wc.run),
    wildcard_constraints:
        run=wildcard_choice(sorted({j.label for j in P1.all_jobs("final")})),
        task=wildcard_choice(sorted({j.task for j in P1.all_jobs("final")})),
    log:
        f"{LOGS}/p1/evaluate/{{run}}/{{task}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/p1/evaluate/{{run}}/{{task}}.tsv"
    threads: config["threads"]
    script:
        "../scripts/p1_evaluate.py"


rule p1_evaluate_checkpoint:
    input:
        unpack(lambda wc: task_inputs(wc.task)),
        record=lambda wc: P1.train_record(wc.run),  # the run's exports exist once it is written
    output:
        results=P1.job_results("{run}@step{step}", "{task}", "checkpoint"),
    params:
        model=lambda wc: P1.run(wc.run).model,
        task=lambda wc: wc.task,
        run=lambda wc: P1.checkpoint_label(wc.run, wc.step),
        decoders=P1.sweep(checkpoint=True),
        settings=lambda wc: P1.eval_settings(wc.task),
        dtype=P1.s.evaluation["dtype"],
        checkpoint=lambda wc: P1.export_dir(wc.run, wc.step),
    wildcard_constraints:
        run=wildcard_choice(sorted({j.run for j in P1.all_jobs("checkpoint")})),
        step=r"\d+",
        task=wildcard_choice(sorted({j.task for j in P1.all_jobs("checkpoint")})),
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
        unpack(lambda wc: P1.reused_baseline(wc.model, wc.task) or eval_inputs(wc)),
    output:
        result=P1.result_path(P1.baseline_label("{model}"), "{task}", P1.BASELINE_DECODER),
    params:
        model=lambda wc: wc.model,
        task=lambda wc: wc.task,
        run=lambda wc: P1.baseline_label(wc.model),
        settings=lambda wc: P1.eval_settings(wc.task),
        dtype=P1.s.evaluation["dtype"],
    wildcard_constraints:
        model=wildcard_choice(sorted({j.run for j in P1.all_jobs("baseline")})),
        task=wildcard_choice(sorted({j.task for j in P1.all_jobs("baseline")})),
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
        student=lambda wc: P1.final_model(wc.run),
        base=lambda wc: model_input(P1.run(wc.run).model),
        data=lambda wc: math_split(P1.run(wc.run).dataset, "validation"),
    output:
        csv=P1.confidence_csv("{run}"),
        summary=f"{P1.analysis_dir('{run}')}/confidence.json",
    params:
        model=lambda wc: P1.run(wc.run).model,
        method=lambda wc: P1.run(wc.run).method,
        spec=P1.confidence(),
        mask_seed=P1.s.mask_seed,
        on_bad_row=lambda wc: dataset_on_bad_row(P1.run(wc.run).dataset),
    wildcard_constraints:
        run=wildcard_choice([P1.s.figures.fig6.run]),
    log:
        f"{LOGS}/p1/confidence/{{run}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/p1/confidence/{{run}}.tsv"
    threads: config["threads"]
    script:
        "../scripts/p1_confidence.py"
