# Paper 2's helpers, included by p2.smk (rule files hold no functions, as snakemake --lint asks). Names of runs,
# mains, settings, result files, tables and figures come from `mtp_core.papers.p2.plan`; these only turn them into
# rule inputs and wildcard choices.
import mtp_core.papers.p2.experiments as p2exp
import mtp_core.papers.p2.plan as p2plan
from mtp_core.papers.p2 import PAPER as P2_PAPER

P2 = P2_PAPER.enabled(config)  # checked before any job (common.smk: validation.check_references -> p2plan.check)
P2_FEATURES = p2plan.feature_keys(config) if P2 else {}


def p2_runs():
    return p2plan.run_names(config) if P2 else []


def p2_mains():
    return p2exp.mains(config) if P2 else []


def p2_speed_experiments():
    return [n for n in p2exp.SPEED_EXPERIMENTS if P2 and p2exp.configured(config, n)]


def p2_trunk_input(main):
    """What loading main `main` reads: a base model's checkpoint, or the run's export holding its trained trunk."""
    return [p2plan.run_model(main)] if p2plan.is_run(config, main) else model_input(main)


def p2_train_inputs(wildcards):
    plan = p2plan.run_plan(config, wildcards.run)
    inputs = {"model": model_input(plan.model), "shards": p2plan.shards_index(plan.dataset)}
    key = p2plan.feature_key(config, wildcards.run)
    if key:
        inputs["features"] = p2plan.feature_dir(key)
    if plan.extend:
        inputs["source"] = p2plan.run_model(plan.extend["from"])
        inputs["trunk"] = p2_trunk_input(p2plan.main_of(config, wildcards.run))
    return inputs


def p2_train_settings(wildcards):
    """The run's settings for `mtp-repro train --method p2`, shell-quoted JSON (a rerun trigger)."""
    return shell_json(p2plan.run_settings(config, wildcards.run))


def p2_launcher(wildcards):
    """Where and how the run trains (launcher settings), shell-quoted JSON; a resource, not a param."""
    return shell_json(p2plan.launcher_settings(config, wildcards.run))


def p2_feature_inputs(wildcards):
    f = P2_FEATURES[wildcards.key]
    return {"model": model_input(f["model"]), "shards": p2plan.shards_index(f["dataset"])}


def p2_reference_inputs(wildcards):
    return {
        "model": p2_trunk_input(wildcards.main),
        "prompts": [prompt_file(ps) for ps in p2plan.prompt_sets(config)],
        "shards": p2plan.windows_spec(config, wildcards.main)["shards"],
    }


def p2_acceptance_inputs(wildcards):
    run = wildcards.run
    main = p2plan.main_of(config, run)
    inputs = {
        "run": p2plan.run_model(run),
        "main": p2_trunk_input(main),
        "references": [p2plan.reference_path(main, ps) for ps in p2plan.prompt_sets(config)],
        "shards": p2plan.windows_spec(config, main)["shards"],
    }
    if p2_base_of(run):
        inputs["base"] = model_input(p2_base_of(run))
    return inputs


def p2_base_of(run):
    """The untrained trunk of a run that trained its trunk (its KL(base ‖ main)), else None."""
    trained = p2plan.is_run(config, p2plan.main_of(config, run))
    return p2plan.run_plan(config, run).model if trained and p2plan.pretrained_base(config) else None


def p2_speed_inputs(experiment):
    rows = p2exp.speed_rows(config, experiment)
    return {
        "models": [f for m in p2exp.speed_mains(config, experiment) for f in p2_trunk_input(m)],
        "prompts": [prompt_file(ps) for ps in p2plan.prompt_sets(config)],
        "runs": sorted({p2plan.run_model(r["run"]) for r in rows}),
    }


def p2_report_inputs(wildcards):
    name = wildcards.get("table") or wildcards.get("figure")
    inputs = p2exp.experiment_inputs(config, name)
    if name == "table3":
        inputs += model_input(p2plan.section(config)["model"])
    return inputs


def p2_run_results(run):
    """Every file of run `run` the tables and figures read (its named target `p2_<run>`)."""
    return p2plan.acceptance_outputs(config, run) + [p2plan.validation_path(run)]
