# Helpers only (no rules): config validation, names of files, and the target list of `rule all`.
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError

from mtp_core.models import plan as model_plan
from mtp_core.train import finetune
from mtp_core.config import layout, registry
from mtp_core.config.plan import BENCH_KEYS
from mtp_core.bench.leaderboard.plan import targets as leaderboard_targets
from mtp_core.config.settings import ConfigError, hub_mirror_path, model_spec, validate_schema
from mtp_core.config.settings import dataset_on_bad_row as on_bad_row_of
from mtp_core.data.prompts import MATH_TEST_SOURCES
from mtp_core.data.rows import train_data_path
from mtp_core.train.launch.settings import LauncherConfig
from mtp_core.evaluate.tasks import task_dataset
from mtp_core.evaluate.tasks import task_inputs as evaluate_task_inputs
from mtp_core.config import hub_mirror
from mtp_core.validation import apply_hub_mirror, check_references


try:
    validate_schema(config)  # the schema (defaults filled): workflow/schemas/config.schema.yaml
    apply_hub_mirror(config)  # the rehearsal: hub references -> their stand-ins in results/hub/ (no mirror: nothing)
    if workflow.is_main_process:  # a cluster job's own Snakemake skips the plan checks its submitter passed
        check_references(config)
except ConfigError as e:
    raise WorkflowError(f"invalid config: {e}")

SCALE = config["scale"]
PYTHON = sys.executable  # the interpreter running Snakemake (the project's venv), for shell rules
RESULTS = layout.RESULTS
LOGS = f"{RESULTS}/logs"


# The `priority` of every job on the way to a trained model (its data, its base model, paper 2's features, paper 5's
# self-distilled rows, the fine-tune and the trainings); every other job has 0. Trainings are the longest jobs at
# every scale, so Snakemake starts them before the decoding and evaluation jobs ready beside them: the chains behind
# them start sooner, and the jobs that time decoding, which run alone, come at the end instead of holding back a
# training.
TRAINING_PATH_PRIORITY = 10


def training_threads(launcher_settings, settings):
    """The `threads` of the training rules, local rules that submit a training and wait for it. When the launcher
    runs the training on this machine (`cluster` local or debug, local by default: `LauncherConfig`) they hold the
    cores it takes, its processes (`nodes` x `tasks_per_node`) times the torch threads of each (`train.threads` of
    its settings, config `threads` by default), so that Snakemake starts nothing else on them; 1 when they only wait
    on Slurm. `launcher_settings(wildcards)` and `settings(wildcards)` give the run's launcher and training
    settings."""

    def threads(wildcards):
        launcher = LauncherConfig.from_dict(launcher_settings(wildcards))
        if launcher.cluster == "slurm":
            return 1
        per_task = settings(wildcards)["train"].get("threads") or config["threads"]
        return launcher.nodes * launcher.tasks_per_node * int(per_task)

    return threads


def bench_threads(bench):
    """The `threads` of each job that times decoding (the bench protocol; paper 5's prices): all the cores of a run
    on this machine (`--cores`), so that Snakemake runs nothing beside it whatever the core count (config
    `bench.alone`), and the torch threads of its `bench` settings elsewhere (a cluster job's request, a dry run
    without `--cores`, `bench.alone` false). The job itself decodes on `bench.threads` threads either way."""
    threads = int(bench["threads"])
    if not config["bench"]["alone"] or not workflow.local_exec or workflow.remote_exec:
        return threads
    try:
        cores = workflow.cores
    except WorkflowError:  # no --cores given (a dry run)
        return threads
    return max(threads, cores) if cores < sys.maxsize else threads


def enabled_papers():
    return registry.enabled_papers(config)


_PLANS = {}


def paper_plan(name):
    """The plan of enabled paper `name` over this config (its `mtp_core.config.plan.PaperPlan`), which its rule
    file and the shared rules (papers.smk) read: built once."""
    if name not in _PLANS:
        _PLANS[name] = registry.papers()[name].plan(config)
    return _PLANS[name]


def with_wildcards(function):
    """A rule's input or params function calling `function` with the job's wildcards as keyword arguments."""
    return lambda wildcards: function(**dict(wildcards.items()))


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
    """Input list of a rule that loads model `name` (its prepared checkpoint, or its hub stand-in)."""
    return model_plan.model_inputs(config, name)


def hub_entries(kind):
    """The `hub_mirror` stand-ins of one kind (models, heads, datasets, files), by hub id; none without a mirror."""
    return (config.get("hub_mirror") or {}).get(kind) or {}


def datasets_of_kind(*kinds):
    return [n for n, ds in config["datasets"].items() if ds["kind"] in kinds]


def dataset_on_bad_row(name):
    return on_bad_row_of(config, name)


math_split = layout.data_split
prompt_file = layout.prompts


def shard_index(name):
    return f"{layout.data_dir(name)}/shards/index.json"


def decode_result(model, task, decoder):
    """Result JSON of a foundation lm-eval run."""
    return layout.decode_result("base", model, task, decoder)


def decode_prompts_result(model, prompt_set, decoder):
    """Result JSON of a foundation prompt-set run."""
    return layout.decode_result("base", model, layout.prompts_task(prompt_set), decoder)


def decode_prompts_results():
    d = config["decoding"]
    return [
        decode_prompts_result(d["model"], ps, dec) for ps in d["prompt_sets"] for dec in d["decoders"]
    ]


def evaluation_results():
    e = config["evaluation"]
    return [decode_result(e["model"], task, dec) for task in e["tasks"] for dec in e["decoders"]]


def task_inputs(task, key="data"):
    """What evaluation task `task` reads from this workflow (`mtp_core.evaluate.tasks.task_inputs`)."""
    return evaluate_task_inputs(config, task, key)


def eval_inputs(wildcards):
    """Model checkpoint and what the task reads (`task_inputs`)."""
    return {"model": model_input(wildcards.model), **task_inputs(wildcards.task)}


def all_targets():
    """Every table and figure of the `all` target: the foundation's, every enabled paper's (`mtp_core.config.registry`), and
    the leaderboard's."""
    targets = [
        layout.table_files("base", "decoding")[0],
        layout.table_files("base", "evaluation")[0],
        layout.figure_files("base", "decoding_speed")[0],
    ]
    targets += [f"{layout.data_dir(n)}/split_report.json" for n in datasets_of_kind("synthetic_math", "metamathqa")]
    targets += [shard_index(n) for n in datasets_of_kind("pretrain_text")]
    for paper in registry.enabled_papers(config):
        targets += paper.targets(config)
    return targets + leaderboard_targets(config)


# ---- data preparation helpers (used by workflow/rules/data.smk) ----


def dataset_local_inputs(name):
    """Local files or directories a dataset reads (MetaMathQA / GSM8K files, a FineWeb directory), as rule
    inputs so that editing them reruns the preparation; hub ids are not files and give nothing."""
    ds = config["datasets"][name]
    if ds["kind"] not in ("metamathqa", "pretrain_text", "sharegpt"):
        return []
    paths = [ds.get("path"), ds.get("test", {}).get("path")]
    paths = [q for p in paths for q in (p if isinstance(p, list) else [p]) if q]
    # a stand-in is both an existing path (once written) and a mirror output: once, so that a rerun is a no-op
    return list(dict.fromkeys([p for p in paths if Path(p).exists()] + hub_mirror.inputs(config, paths)))


def pretrain_rows_input(name):
    """{"rows": the rows file} of a pretrain_text dataset of source rows (its dataset's train or validation
    split), else {}."""
    ds = config["datasets"][name]
    if ds.get("source") != "rows":
        return {}
    split = ds.get("split", "train")
    return {"rows": train_data_path(ds["dataset"]) if split == "train" else math_split(ds["dataset"], split)}


def prompt_set_inputs(wildcards):
    """Named inputs of a prompt set: its math dataset's test split (sources math and specbench) or the user file
    (source jsonl)."""
    ps = config["prompt_sets"][wildcards.prompt_set]
    if ps["source"] in MATH_TEST_SOURCES:
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


def finetune_inputs(wildcards):
    spec = config["models"][wildcards.model]
    return finetune.rows_training_inputs(config, spec["base"], spec["dataset"])
