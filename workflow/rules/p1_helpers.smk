# Paper 1's helpers, included by p1.smk (rule files hold no functions, as snakemake --lint asks). The names of runs,
# decoder labels, result files, tables and figures come from `mtp_core.papers.p1.plan`; these only turn them into rule
# inputs and wildcard choices.
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
    """What the task reads (`task_inputs`: a local task's test split, hub stand-ins)."""
    return task_inputs(task)


def p1_eval_inputs(wildcards):
    """Final student of the run and the task's test split (local tasks)."""
    return {"checkpoint": p1_final_model(wildcards.run), **p1_task_data(wildcards.task)}


def p1_checkpoint_inputs(wildcards):
    """The run's training record (its exports exist once it is written) and the task's test split."""
    return {"record": p1_train_record(wildcards.run), **p1_task_data(wildcards.task)}


def p1_export_dir(run, step):
    from mtp_core.train.config import step_dir_name

    return f"{p1_run_dir(run)}/exports/{step_dir_name(int(step))}"


def p1_baseline_source(model, task):
    """The foundation's result of the same evaluation (base model `model`, greedy, same task and settings), which
    the step-0 baseline then reuses instead of decoding again; None when there is none."""
    e = config["evaluation"]
    if model != e["model"] or task not in e["tasks"] or e["decoders"].get("greedy", None) != {}:
        return None
    if p1plan.eval_dtype(config) not in (None, config["models"][model].get("dtype")):
        return None
    from mtp_core.evaluate import EvalSettings

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
