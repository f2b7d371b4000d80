# Helpers only (no rules): config validation, names of files, and the target list of `rule all`.
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from mtp_core import model_plan
from mtp_core.config import ConfigError, check_references, config_hash, model_spec
from mtp_core.config import dataset_on_bad_row as on_bad_row_of
from mtp_core.evaluate.tasks import task_dataset


validate(config, "../schemas/config.schema.yaml")
try:
    check_references(config)
except ConfigError as e:
    raise WorkflowError(f"invalid config: {e}")

SCALE = config["scale"]
PYTHON = sys.executable  # the interpreter running Snakemake (the project's venv), for shell rules
CONFIG_HASH = config_hash(config)
RESULTS = "results"
LOGS = f"{RESULTS}/logs"


def shell_json(obj):
    """`obj` as one shell word of JSON (for the command line of a shell rule)."""
    import json
    import shlex

    return shlex.quote(json.dumps(obj, sort_keys=True))


def wildcard_choice(names):
    """A wildcard constraint accepting exactly these names."""
    import re

    return "|".join(re.escape(n) for n in names) or "(?!)"


def prepared_models():
    """Models `prepare_model` materialises (gguf, tiny)."""
    return model_plan.materialised_models(config)


def model_dir(name):
    """Checkpoint dir of a gguf/tiny/finetuned model, or None for hub/local models (loaded where they are)."""
    return model_plan.model_dir(config, name, RESULTS)


def model_input(name):
    """Input list of a rule that loads model `name`."""
    d = model_dir(name)
    return [d] if d else []


def dataset_kind(name):
    return config["datasets"][name]["kind"]


def datasets_of_kind(*kinds):
    return [n for n, ds in config["datasets"].items() if ds["kind"] in kinds]


def dataset_on_bad_row(name):
    return on_bad_row_of(config, name)


def math_split(name, split):
    return f"{RESULTS}/data/{name}/{split}.jsonl"


def shard_index(name):
    return f"{RESULTS}/data/{name}/shards/index.json"


def prompt_file(name):
    return f"{RESULTS}/prompts/{name}.jsonl"


def decode_result(model, task, decoder):
    """Result JSON of a foundation lm-eval run: results/decode/base/<model>/<task>/<decoder>.json"""
    return f"{RESULTS}/decode/base/{model}/{task}/{decoder}.json"


def decode_prompts_result(model, prompt_set, decoder):
    """Result JSON of a foundation prompt-set run: results/decode/base/<model>/prompts-<set>/<decoder>.json"""
    return f"{RESULTS}/decode/base/{model}/prompts-{prompt_set}/{decoder}.json"


def decode_prompts_results():
    d = config["decoding"]
    return [
        decode_prompts_result(d["model"], ps, dec) for ps in d["prompt_sets"] for dec in d["decoders"]
    ]


def evaluation_results():
    e = config["evaluation"]
    return [decode_result(e["model"], task, dec) for task in e["tasks"] for dec in e["decoders"]]


def eval_inputs(wildcards):
    """Model checkpoint and, for local tasks, the test split the task reads."""
    inputs = {"model": model_input(wildcards.model)}
    dataset = task_dataset(config, wildcards.task)
    if dataset is not None:
        inputs["data"] = math_split(dataset, "test")
    return inputs


def all_targets():
    """Every table and figure of `rule all` (the foundation's decoding tables; papers add theirs)."""
    targets = [
        f"{RESULTS}/tables/base/decoding.csv",
        f"{RESULTS}/tables/base/evaluation.csv",
        f"{RESULTS}/figures/base/decoding_speed.png",
    ]
    targets += [f"{RESULTS}/data/{n}/split_report.json" for n in datasets_of_kind("synthetic_math", "metamathqa")]
    targets += [shard_index(n) for n in datasets_of_kind("pretrain_text")]
    targets += p1_all_targets()
    targets += p3_all_targets()
    return targets


# ---- data preparation helpers (used by workflow/rules/data.smk) ----


def dataset_local_inputs(name):
    """Local files or directories a dataset reads (MetaMathQA / GSM8K files, a FineWeb directory), as rule
    inputs so that editing them reruns the preparation; hub ids are not files and give nothing."""
    ds = config["datasets"][name]
    paths = [ds.get("path"), ds.get("test", {}).get("path")] if ds["kind"] in ("metamathqa", "pretrain_text") else []
    return [p for p in paths if p and Path(p).exists()]


def prompt_set_inputs(wildcards):
    """Named inputs of a prompt set: the math test split (source math) or the user file (source jsonl)."""
    ps = config["prompt_sets"][wildcards.prompt_set]
    if ps["source"] == "math":
        return {"math_test": math_split(ps["dataset"], "test")}
    if ps["source"] == "jsonl":
        return {"jsonl": ps["path"]}
    return {}


def prompt_set_on_bad_row(name):
    """on_bad_row of the dataset a prompt set reads (math: its dataset; humaneval / sharegpt / specbench: the
    dataset of that kind, ShareGPT's for specbench), else the global setting."""
    ps = config["prompt_sets"][name]
    if ps["source"] == "math":
        return dataset_on_bad_row(ps["dataset"])
    kind = {"humaneval": "humaneval", "sharegpt": "sharegpt", "specbench": "sharegpt"}.get(ps["source"])
    names = datasets_of_kind(kind) if kind else []
    return dataset_on_bad_row(names[0]) if names else config["on_bad_row"]


# ==================================================================================================== paper 1
# MTP via self-distillation (workflow/rules/p1.smk). Names of runs, decoder labels, result files, tables and
# figures come from `mtp_core.p1_plan`; these helpers only turn them into rule inputs and wildcard choices.

import mtp_core.p1_plan as p1plan

P1 = p1plan.enabled(config)  # checked with the other references above (config.check_references -> p1plan.check)
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
    """The run's settings for `mtp_core.train.launch --method p1`, shell-quoted JSON (a rerun trigger)."""
    return shell_json(p1plan.run_settings(config, wildcards.run))


def p1_launcher(wildcards):
    """Where and how the run trains (launcher settings), shell-quoted JSON. A resource, not a param: moving a
    training to another cluster or partition must not make Snakemake retrain it."""
    return shell_json(p1plan.launcher_settings(config, wildcards.run))


def p1_jobs(kind):
    return [j for j in P1_JOBS if j.kind == kind]


def p1_train_inputs(wildcards):
    plan = p1plan.run_plan(config, wildcards.run)
    return {"model": model_input(plan.model), "data": p1plan.train_data_path(plan.dataset)}


def p1_chat_datasets():
    """Conversation datasets (kind sharegpt) some paper-1 run or fine-tuned model trains on; their first turns
    become train.jsonl."""
    names = {config["models"][m]["dataset"] for m in model_plan.finetuned_models(config)}
    if P1:
        names |= {p1plan.run_plan(config, r).dataset for r in p1_runs()}
    return [n for n in datasets_of_kind("sharegpt") if n in names]


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


def p1_target_files(name):
    """The files of table or figure `name` (the CSV and markdown; the PNG and PDF)."""
    if name in p1plan.TABLES:
        return [f"{RESULTS}/tables/p1/{name}.csv", f"{RESULTS}/tables/p1/{name}.md"]
    return [f"{RESULTS}/figures/p1/{name}.png", f"{RESULTS}/figures/p1/{name}.pdf"]


def p1_all_targets():
    """Paper 1's share of the `all` target: the tables and figures of `papers.p1.in_all`."""
    if not P1:
        return []
    return [f for name in p1plan.targets_in_all(config) for f in p1_target_files(name)]


def p1_run_results(run):
    """Every result file of run `run` that some table or figure reads (its named target `p1_<run>`)."""
    jobs = [j for j in P1_JOBS if j.run == run and j.kind != "baseline"]
    return p1plan.jobs_results(config, jobs)


# ==================================================================================================== paper 3
# Training-free probing (workflow/rules/p3.smk). Methods, settings, result files, tables and figures come from
# `mtp_core.p3_plan`; these helpers only turn them into rule inputs and wildcard choices.

import mtp_core.p3_plan as p3plan

P3 = p3plan.enabled(config)  # checked with the other references above (config.check_references -> p3plan.check)
P3_JOBS = p3plan.decode_jobs(config) if P3 else []


def p3_methods():
    """Methods with a decoding job (on some model)."""
    return list(dict.fromkeys(j.method for j in P3_JOBS))


def p3_decode_outputs():
    """Result files of a decoding job, with `{model}` and `{method}` wildcards: greedy, then each BC."""
    bcs = p3plan.block_complexities(config) if P3 else []
    names = [p3plan.setting_label("{method}", None)] + [p3plan.setting_label("{method}", bc) for bc in bcs]
    return [p3plan.result_path("{model}", p3plan.prompt_set(config) if P3 else "", n) for n in names]


def p3_decode_inputs(wildcards):
    return {"model": model_input(wildcards.model), "prompts": prompt_file(p3plan.prompt_set(config))}


def p3_alignment_csv(model):
    return f"{p3plan.alignment_dir(model)}/alignment.csv"


def p3_alignment_inputs(wildcards):
    return {"model": model_input(wildcards.model), "prompts": prompt_file(p3plan.prompt_set(config))}


def p3_experiment_inputs(wildcards):
    """Result files of a table or per-category figure (`wildcards.table` or `wildcards.figure`)."""
    return p3plan.experiment_results(config, getattr(wildcards, "table", None) or wildcards.figure)


def p3_experiment_params(name):
    """What the table / figure script needs: the settings it shows (paths, references, titles, BCs)."""
    return {"name": name, "settings": p3plan.experiment_settings(config, name)}


def p3_all_targets():
    """Paper 3's share of the `all` target: the tables and figures of `papers.p3.in_all`."""
    if not P3:
        return []
    return [f for name in p3plan.targets_in_all(config) for f in p3plan.target_files(name)]



def finetune_inputs(wildcards):
    spec = config["models"][wildcards.model]
    return {"model": model_input(spec["base"]), "data": p1plan.train_data_path(spec["dataset"])}
