# Paper 3's helpers, included by p3.smk (rule files hold no functions, as snakemake --lint asks). The methods,
# settings, result files, tables and figures come from `mtp_core.papers.p3.plan`; these only turn them into rule
# inputs and wildcard choices.
import mtp_core.papers.p3.plan as p3plan
from mtp_core.papers.p3 import PAPER as P3_PAPER

P3 = P3_PAPER.enabled(config)  # checked before any job (common.smk: validation.check_references -> p3plan.check)
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
