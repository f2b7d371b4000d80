# Paper 4's helpers, included by p4.smk (rule files hold no functions, as snakemake --lint asks). The names of runs,
# labels, settings, result files, tables and figures come from `mtp_core.papers.p4.plan`; these only turn them into
# rule inputs and wildcard choices.
import mtp_core.papers.p4.plan as p4plan
from mtp_core.papers.p4 import PAPER as P4_PAPER

P4 = P4_PAPER.enabled(config)  # checked before any job (common.smk: validation.check_references -> p4plan.check)
P4_LABELS = p4plan.label_taus(config) if P4 else {}


def p4_runs():
    return p4plan.run_names(config) if P4 else []


def p4_final_model(run):
    return f"{p4plan.run_dir(run)}/model"


def p4_train_record(run):
    return f"{p4plan.run_dir(run)}/train.json"


def p4_train_settings(wildcards):
    """The run's settings for `mtp-repro train --method p4`, shell-quoted JSON (a rerun trigger)."""
    return shell_json(p4plan.run_settings(config, wildcards.run))


def p4_launcher(wildcards):
    """Launcher settings (a resource, not a param: moving a training elsewhere must not retrain it)."""
    return shell_json(p4plan.launcher_settings(config, wildcards.run))


def p4_train_inputs(wildcards):
    plan = p4plan.run_plan(config, wildcards.run)
    return {"model": model_input(plan.model), "data": train_data_path(plan.dataset)}


def p4_weights(label):
    """(kind, the trained checkpoint or None) of an evaluated label."""
    kind, name = p4plan.parse_label(config, label)
    return kind, (p4_final_model(name) if kind == "trained" else None)


def p4_label(wildcards):
    """The label of an evaluation job (`p4_evaluate`: wildcard label; `p4_vanilla`: `<model>@step0`)."""
    return wildcards.label if hasattr(wildcards, "label") else p4plan.vanilla_label(wildcards.model)


def p4_eval_outputs(label, tau):
    """The files of one evaluation job: its teacher-forced result, then each task's (tau None: the vanilla job)."""
    tf = p4plan.VANILLA_TF if tau is None else p4plan.setting_label(tau) if tau.isdigit() else f"dmtd-tau{tau}"
    gen = p4plan.VANILLA_GEN if tau is None else tf
    return [p4plan.result_path(label, p4plan.tf_task(config) if P4 else "", tf)] + [
        p4plan.result_path(label, t, gen) for t in (p4plan.tasks(config) if P4 else [])
    ]


def p4_eval_inputs(wildcards):
    """The label's weights (trained checkpoint, or the start model's directory), the held-out split, the tasks'
    test splits."""
    label = p4_label(wildcards)
    kind, checkpoint = p4_weights(label)
    inputs = {"weights": [checkpoint] if checkpoint else model_input(p4plan.label_model(config, label))}
    inputs["validation"] = math_split(p4plan.tf_dataset(config), "validation")
    for task in p4plan.tasks(config):
        inputs.update(task_inputs(task, f"task_{task}"))
    return inputs


def p4_eval_params(wildcards):
    """What the evaluation script needs (p4plan: the setting, outputs, teacher-forced and task specs)."""
    label = p4_label(wildcards)
    kind, checkpoint = p4_weights(label)
    model = p4plan.label_model(config, label)
    tf = p4plan.section(config).get("teacher_forced") or {}
    run = p4plan.parse_label(config, label)[1]
    template = p4plan.run_plan(config, run).method.get("template", "auto") if kind != "vanilla" else "auto"
    dataset = p4plan.tf_dataset(config)
    if kind == "vanilla":
        tf_setting, settings = p4plan.VANILLA_TF, {p4plan.VANILLA_GEN: {"decoder": "greedy"}}
    else:
        tf_setting = p4plan.setting_label(int(wildcards.tau))
        settings = {tf_setting: p4plan.setting_params(config, label, int(wildcards.tau))}
    return {
        "label": label,
        "model": model,
        "checkpoint": checkpoint,
        "settings": settings,
        "tf": {
            "task": p4plan.tf_task(config),
            "dataset": dataset,
            "data": math_split(dataset, "validation"),
            "rows": tf.get("rows", 256),
            "batch_size": tf.get("batch_size", 8),
            "max_tokens": tf.get("max_tokens", 4096),
            "template": template,
            "on_bad_row": dataset_on_bad_row(dataset),
        },
        "tf_outputs": {tf_setting: p4plan.result_path(label, p4plan.tf_task(config), tf_setting)},
        "tasks": {
            t: {
                "data": math_split(task_dataset(config, t), "test") if task_dataset(config, t) else None,
                "outputs": {st: p4plan.result_path(label, t, st) for st in settings},
                "settings": p4plan.eval_settings(config, t),
            }
            for t in p4plan.tasks(config)
        },
    }


def p4_speed_outputs():
    run = p4plan.speed_run(config) if P4 else None
    return p4plan.speed_results(config) if run else []


def p4_speed_params():
    if not P4 or p4plan.speed_run(config) is None:
        return {}
    run, spec = p4plan.speed_run(config), p4plan.speed_spec(config)
    sizes = spec.get("batch_sizes") or [1]
    return {
        "run": run,
        "spec": spec,
        "settings": p4plan.speed_settings(config),
        "outputs": {b: [p4plan.result_path(run, p4plan.speed_task(b), st) for st in p4plan.speed_settings(config)] for b in sizes},
        "layer_costs": {b: p4plan.layer_costs_path(run, b) for b in sizes},
        "bench": {**{k: config["bench"].get(k) for k in ("warmup", "repeats", "threads")}, **(p4plan.section(config).get("bench") or {})},
    }


def p4_layer_cost_files():
    params = p4_speed_params()
    return list((params.get("layer_costs") or {}).values())


def p4_select_params(run):
    """The τ choice's inputs: the run's teacher-forced results at the speed job's τ, the vanilla one, and the speed
    results at the smallest batch size (the held-out split and random prompts only, never the test prompts)."""
    plan = p4plan.run_plan(config, run)
    task = p4plan.tf_task(config)
    spec = p4plan.speed_spec(config)
    batch = min(spec.get("batch_sizes") or [1])
    taus = sorted(int(t) for t in spec.get("taus") or [])
    tf = {t: p4plan.result_path(run, task, p4plan.setting_label(t)) for t in taus}
    speed = {t: p4plan.result_path(run, p4plan.speed_task(batch), p4plan.setting_label(t)) for t in taus}
    vanilla = p4plan.result_path(p4plan.vanilla_label(plan.model), task, p4plan.VANILLA_TF)
    return {
        "vanilla": vanilla,
        "tf": tf,
        "speed": speed,
        "threshold": float(p4plan.leaderboard_spec(config).get("retention", 0.9)),
        "files": [vanilla, *tf.values(), *speed.values()],
    }


def p4_table_inputs(wildcards):
    if wildcards.table == p4plan.SPEED_TABLE:
        return p4_speed_outputs() + p4_layer_cost_files()
    return p4plan.table_results(config, wildcards.table)


def p4_table_params(table):
    if table == p4plan.SPEED_TABLE:
        return {"kind": "speed", **p4_speed_params()}
    return {
        "kind": "quality",
        "layout": p4plan.table_layout(config, table),
        "columns": p4plan.columns(config),
        "overall": p4plan.overall_columns(config),
        "metrics": {**{t: p4plan.task_metric(config, t) for t in p4plan.tasks(config)}, p4plan.TF_COLUMN: "tf_acc,none"},
        "titles": p4plan.column_titles(config),
        "offsets": max(t for _, t in p4plan.quality_rows(config, table)) if table == "table5" else 0,
    }


def p4_fig5_inputs():
    return [p4_train_record(r) for r in p4plan.figure_spec(config, "fig5").get("runs") or []] if P4 else []


def p4_fig5_params():
    if not P4:
        return {}
    spec = p4plan.figure_spec(config, "fig5")
    return {
        "curves": {p4plan.run_plan(config, r).title: [f"{p4plan.run_dir(r)}/curves.csv", f"{p4plan.run_dir(r)}/train_summary.json"] for r in spec.get("runs") or []},
        "bins": int(spec.get("bins", 12)),
    }


def p4_run_results(run):
    """Every result of run `run` some table reads, and its training (the named target `p4_<run>`)."""
    labels = [lab for lab in P4_LABELS if p4plan.parse_label(config, lab)[1] == run]
    out = [f for lab in labels for f in p4plan.job_results(config, lab)]
    return [p4_train_record(run), *out]
