# Paper 5's helpers, included by p5.smk (rule files hold no functions, as snakemake --lint asks). Tasks, heads, the
# frontier's and the decoding jobs' files come from `mtp_core.papers.p5.plan`; these only turn them into rule inputs
# and wildcard choices.
import mtp_core.papers.p5.plan as p5plan
from mtp_core.papers.p5 import PAPER as P5_PAPER

P5 = P5_PAPER.enabled(config)  # checked before any job (common.smk: validation.check_references -> papers.p5.checks.check)


def p5_tasks():
    return list(p5plan.tasks(config)) if P5 else []


def p5_split_outputs():
    return {f"{t}_{s}": p5plan.split_path(t, s) for t in p5_tasks() for s in ("test", "calib", "train")}


def p5_math_inputs():
    """The split files of the math datasets the tasks read."""
    if not P5:
        return {}
    return {
        f"{d}_{s}": math_split(d, s) for d in p5plan.math_datasets(config) for s in ("train", "validation", "test")
    }


def p5_trained_heads():
    return p5plan.trained_heads(config) if P5 else []


def p5_imported_heads():
    return [h for h in p5plan.heads_names(config) if h not in p5_trained_heads()] if P5 else []


def p5_heads_settings(wildcards):
    """The heads' settings for `mtp-repro train --method p5_heads`, shell-quoted JSON (a rerun trigger)."""
    return shell_json(p5plan.heads_settings(config, wildcards.heads))


def p5_launcher(wildcards):
    """Where and how the heads train: a resource, not a param (moving a training must not retrain it)."""
    return shell_json(p5plan.launcher_settings(config, wildcards.heads))


def p5_frontier_outputs():
    """Every task's frontier files of heads `{heads}` (one job: the model loads and the verification is priced once)."""
    return [f for t in p5_tasks() for f in p5plan.frontier_files("{heads}", t)]


def p5_frontier_inputs(wildcards):
    return {
        "model": model_input(p5plan.model(config)),
        "heads": p5plan.heads_dir(wildcards.heads),
        "calib": [p5plan.split_path(t, "calib") for t in p5_tasks()],
    }


def p5_decode_inputs(wildcards):
    return {
        "model": model_input(p5plan.model(config)),
        "prompts": p5plan.split_path(wildcards.task, "test"),
        "heads": p5plan.job_inputs(config, wildcards.task),
    }


def p5_decode_outputs():
    names = [p5plan.REFERENCE] + (p5plan.decode_methods(config) if P5 else [])
    model = p5plan.model(config) if P5 else ""
    return [f"{RESULTS}/decode/p5/{model}/prompts-p5-{{task}}/{n}.json" for n in names]


def p5_check_file(task):
    model = p5plan.model(config) if P5 else ""
    return f"{RESULTS}/decode/p5/{model}/prompts-p5-{task}/simulation_check.json"


def p5_table_inputs(wildcards):
    files = p5plan.table_inputs(config, wildcards.table)
    if wildcards.table == "table1":
        files += [p5_check_file(t) for t in p5plan.table_spec(config, "table1")["tasks"]]
    return files
