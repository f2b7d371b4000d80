# Paper 1: MTP via self-distillation (papers/01_mtp_self_distillation.txt). Training runs (main recipe and the
# ablations of Tables 3-5), the decoding sweep (Static k, ConfAdapt tau) of every final student and of the
# training-dynamics exports, the step-0 baseline, the confidence analysis of Figure 6, Tables 1-5 and
# Figures 5-11. Every name comes from `mtp_core.papers.p1.plan` through the helpers below.
#   snakemake -c2 results/tables/p1/table4.csv     one table (trains and evaluates the runs it shows)
#   snakemake -c2 p1_bda                           one ablation run: training + every evaluation it is in

# ---- helpers: names of runs, decoder labels, result files, tables and figures come from `mtp_core.papers.p1.plan`;
# these only turn them into rule inputs and wildcard choices.
import mtp_core.papers.p1.plan as p1plan
from mtp_core.papers.p1 import PAPER as P1_PAPER

P1 = P1_PAPER.enabled(config)  # checked before any job (common.smk: validation.check_references -> p1plan.check)
P1_SWEEP = p1plan.sweep(config) if P1 else {}
P1_CHECKPOINT_SWEEP = p1plan.sweep(config, checkpoint=True) if P1 else {}
P1_JOBS = p1plan.all_jobs(config) if P1 else []


def p1_runs():
    return p1plan.run_names(config) if P1 else []


def p1_run_dir(run):
    return p1plan.run_dir(run)


def p1_final_model(run):
    """The trained student of `run` (HF checkpoint, output of p1_train)."""
    return f"{p1_run_dir(run)}/model"


def p1_train_record(run):
    """The launcher's record of a finished training (job, steps, attempts; written only on success)."""
    return f"{p1_run_dir(run)}/train.json"


def p1_train_settings(wildcards):
    """The run's settings for `mtp-repro train --method p1`, shell-quoted JSON (a rerun trigger)."""
    return shell_json(p1plan.run_settings(config, wildcards.run))


def p1_launcher(wildcards):
    """Where and how the run trains (launcher settings), shell-quoted JSON. A resource, not a param: moving a
    training to another cluster or partition must not make Snakemake retrain it."""
    return shell_json(p1plan.launcher_settings(config, wildcards.run))


def p1_jobs(kind):
    return [j for j in P1_JOBS if j.kind == kind]


def p1_train_inputs(wildcards):
    plan = p1plan.run_plan(config, wildcards.run)
    return {"model": model_input(plan.model), "data": train_data_path(plan.dataset)}


def p1_task_data(task):
    """{"data": test split} for a local task, else {}."""
    dataset = task_dataset(config, task)
    return {"data": math_split(dataset, "test")} if dataset is not None else {}


def p1_eval_inputs(wildcards):
    """Final student of the run and the task's test split (local tasks)."""
    return {"checkpoint": p1_final_model(wildcards.run), **p1_task_data(wildcards.task)}


def p1_checkpoint_inputs(wildcards):
    """The run's training record (its exports exist once it is written) and the task's test split."""
    return {"record": p1_train_record(wildcards.run), **p1_task_data(wildcards.task)}


def p1_export_dir(run, step):
    from mtp_core.train.checkpoint import step_dir_name

    return f"{p1_run_dir(run)}/exports/{step_dir_name(int(step))}"


def p1_baseline_source(model, task):
    """The foundation's result of the same evaluation (base model `model`, greedy, same task and settings), which
    the step-0 baseline then reuses instead of decoding again; None when there is none."""
    e = config["evaluation"]
    if model != e["model"] or task not in e["tasks"] or e["decoders"].get("greedy", None) != {}:
        return None
    from mtp_core.evaluate.run import EvalSettings

    if EvalSettings.from_config(config, **p1plan.eval_settings(config, task)) != EvalSettings.from_config(config):
        return None
    return decode_result(model, task, "greedy")


def p1_baseline_inputs(wildcards):
    source = p1_baseline_source(wildcards.model, wildcards.task)
    if source is not None:
        return {"foundation": source}
    return {"model": model_input(wildcards.model), **p1_task_data(wildcards.task)}


def p1_table_inputs(wildcards):
    return p1plan.jobs_results(config, p1plan.table_jobs(config, wildcards.table))


def p1_figure_inputs(wildcards):
    return p1plan.jobs_results(config, p1plan.figure_jobs(config, wildcards.figure))


def p1_table_params(table):
    spec = p1plan.table_spec(config, table)
    return {
        "runs": list(spec["runs"]),
        "tasks": list(spec["tasks"]),
        "metrics": {t: p1plan.task_metric(config, t) for t in spec["tasks"]},
        "titles": {r: p1plan.run_plan(config, r).title for r in spec["runs"]},
    }


def p1_figure_params(figure):
    spec = p1plan.figure_spec(config, figure)
    runs = list(spec.get("runs") or [spec["run"]])
    out = {
        "task": spec["task"],
        "metric": p1plan.task_metric(config, spec["task"]),
        "titles": {r: p1plan.run_plan(config, r).title for r in runs},
    }
    if figure in p1plan.DYNAMICS_FIGURES:
        out |= {"run": spec["run"], "final_step": p1plan.run_plan(config, spec["run"]).max_steps}
    else:
        out["runs"] = runs
    return out


def p1_confidence_csv(run):
    return f"{RESULTS}/analysis/p1/{run}/confidence.csv"


def p1_confidence_inputs(wildcards):
    plan = p1plan.run_plan(config, wildcards.run)
    return {
        "student": p1_final_model(wildcards.run),
        "base": model_input(plan.model),
        "data": math_split(plan.dataset, "validation"),
    }


def p1_run_results(run):
    """Every result file of run `run` that some table or figure reads (its named target `p1_<run>`)."""
    jobs = [j for j in P1_JOBS if j.run == run and j.kind != "baseline"]
    return p1plan.jobs_results(config, jobs)

# Training runs through the submitit launcher (`mtp_core.train.launch`, cluster from config `launcher`): a local
# rule that submits the job and waits, so `benchmark:` would time the wait; the launcher records the job's cost
# in train.json.cost.json instead. Declared outputs are only the launcher's record and the final model:
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
    localrule: True
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
