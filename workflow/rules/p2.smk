# Paper 2: MTP-D, cascaded MTP heads with Top-N KL self-distillation.
# The frozen trunk's feature cache, head trainings (the MTP / MTP-D runs, ablations and looped extensions), greedy
# references per trunk, AR / CAR per run from the teacher-forced simulation, the speed experiments (bench protocol)
# and Tables 1-8, Figures 3-7, 9-14. Every name comes from `mtp_core.papers.p2.plan` through p2_helpers.smk.
#   snakemake -c2 results/tables/p2/table2.csv     one table (trains and evaluates the runs it shows)
#   snakemake -c2 p2_mtpd_k4                        one run: its training and every evaluation of it

include: "p2_helpers.smk"


# The frozen trunk's hidden states on the training windows, once for every run that reads them.
rule p2_features:
    input:
        unpack(p2_feature_inputs),
    output:
        directory(p2plan.feature_dir("{key}")),
    params:
        spec=lambda wc: P2_FEATURES[wc.key],
        model=lambda wc: P2_FEATURES[wc.key]["model"],
    wildcard_constraints:
        key=wildcard_choice(list(P2_FEATURES)),
    log:
        f"{LOGS}/p2/features/{{key}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/p2/features/{{key}}.tsv"
    threads: config["threads"]
    script:
        "../scripts/p2_features.py"


# Training through the submitit launcher (as p1_train): declared outputs are the launcher's record and the final
# export (heads, and the trunk when it trained); checkpoints/ and curves.csv survive a killed job.
rule p2_train:
    input:
        unpack(p2_train_inputs),
    output:
        record=p2plan.run_record("{run}"),
        model=directory(p2plan.run_model("{run}")),
    params:
        settings=p2_train_settings,
        run_dir=lambda wc: p2plan.run_dir(wc.run),
        python=PYTHON,
    wildcard_constraints:
        run=wildcard_choice(p2_runs()),
    log:
        f"{LOGS}/p2/train/{{run}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/p2/train/{{run}}.tsv"
    localrule: True
    threads: training_threads(lambda wc: p2plan.launcher_settings(config, wc.run))
    resources:
        submitit_jobs=1,
        launcher=p2_launcher,
    shell:
        "{params.python} -m mtp_core.cli train --method p2 --output {output.record} --run-dir {params.run_dir}"
        " --settings {params.settings} --launcher {resources.launcher} > {log} 2>&1"


# Greedy continuations of every prompt set from one trunk, past the budget (the simulation's last step), and the
# main head's Top-N mass on the validation windows (Fig. 6).
rule p2_reference:
    input:
        unpack(p2_reference_inputs),
    output:
        results=[p2plan.reference_path("{main}", ps) for ps in (p2plan.prompt_sets(config) if P2 else [])],
        topn_csv=p2plan.topn_path("{main}", "csv"),
        topn=p2plan.topn_path("{main}", "json"),
    params:
        prompt_sets=p2plan.prompt_sets(config) if P2 else {},
        windows=lambda wc: p2plan.windows_spec(config, wc.main),
        settings={k: p2plan.section(config).get(k) for k in ("max_new_tokens", "reference_extra_tokens")},
    wildcard_constraints:
        main=wildcard_choice(p2_mains()),
    log:
        f"{LOGS}/p2/reference/{{main}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/p2/reference/{{main}}.tsv"
    threads: config["threads"]
    script:
        "../scripts/p2_reference.py"


# AR / CAR of one run's heads at every draft count (teacher-forced simulation), and its validation metrics.
rule p2_acceptance:
    input:
        unpack(p2_acceptance_inputs),
    output:
        results=[
            p2plan.acceptance_path("{run}", ps, p2plan.setting_label(d))
            for ps in (p2plan.prompt_sets(config) if P2 else [])
            for d in (p2plan.depths(config) if P2 else [])
        ],
        validation=p2plan.validation_path("{run}"),
    params:
        depths=p2plan.depths(config) if P2 else [],
        prompt_sets=p2plan.prompt_sets(config) if P2 else {},
        main=lambda wc: p2plan.main_of(config, wc.run),
        heads=lambda wc: p2plan.heads_path(config, wc.run),
        method=lambda wc: p2plan.run_plan(config, wc.run).method,
        windows=lambda wc: p2plan.windows_spec(config, p2plan.main_of(config, wc.run)),
        max_new_tokens=p2plan.section(config).get("max_new_tokens"),
        base=lambda wc: p2_base_of(wc.run),
    wildcard_constraints:
        run=wildcard_choice(p2_runs()),
    log:
        f"{LOGS}/p2/acceptance/{{run}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/p2/acceptance/{{run}}.tsv"
    threads: config["threads"]
    script:
        "../scripts/p2_acceptance.py"


# One bench per speed experiment (Fig. 4, Fig. 5, Table 8): greedy and its mtp-spec rows side by side, under each
# decoding protocol (with a KV cache; without one, App. D's).
for _exp in p2_speed_experiments():

    rule:
        name:
            f"p2_speed_{_exp}"
        input:
            **p2_speed_inputs(_exp),
        output:
            results=p2exp.speed_outputs(config, _exp),
        params:
            experiment=_exp,
            trunks=p2exp.speed_trunks(config, _exp),
            decoders=p2exp.speed_decoders(config, _exp),
            refs=p2exp.speed_refs(config, _exp),
            prompt_sets=p2plan.prompt_sets(config),
            speed=p2plan.section(config)["speed"],
            bench=p2exp.speed_bench(config),
        log:
            f"{LOGS}/p2/speed/{_exp}.log",
        benchmark:
            f"{RESULTS}/benchmarks/p2/speed/{_exp}.tsv"
        threads: config["threads"]
        script:
            "../scripts/p2_speed.py"


rule p2_table:
    input:
        p2_report_inputs,
    output:
        csv=report(
            f"{RESULTS}/tables/p2/{{table}}.csv",
            caption="../report/p2_tables.rst",
            category="Paper 2",
            subcategory="Tables",
        ),
        md=f"{RESULTS}/tables/p2/{{table}}.md",
    params:
        kind="table",
        spec=lambda wc: p2exp.report_params(config, wc.table),
    wildcard_constraints:
        table=wildcard_choice(p2exp.TABLES),
    log:
        f"{LOGS}/tables/p2_{{table}}.log",
    localrule: True
    script:
        "../scripts/p2_report.py"


rule p2_figure:
    input:
        p2_report_inputs,
    output:
        png=report(
            f"{RESULTS}/figures/p2/{{figure}}.png",
            caption="../report/p2_figures.rst",
            category="Paper 2",
            subcategory="Figures",
        ),
        pdf=f"{RESULTS}/figures/p2/{{figure}}.pdf",
    params:
        kind="figure",
        spec=lambda wc: p2exp.report_params(config, wc.figure),
    wildcard_constraints:
        figure=wildcard_choice(p2exp.FIGURES),
    log:
        f"{LOGS}/figures/p2_{{figure}}.log",
    localrule: True
    script:
        "../scripts/p2_report.py"


# One named target per run, e.g. `snakemake -c2 p2_mtpd_k4`: its training and every evaluation of it.
for _run in p2_runs():

    rule:
        name:
            f"p2_{_run}"
        input:
            p2_run_results(_run),
        localrule: True
