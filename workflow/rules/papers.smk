# The rules every enabled paper shares, read from its plan (`mtp_core.config.plan.PaperPlan`): one for its
# trainings (`<paper>_train`, method `TRAIN_METHOD`), one for its tables and one for its figures (`<paper>_table`,
# `<paper>_figure`: a local job of pandas or matplotlib running `workflow/scripts/<paper>_table.py` /
# `<paper>_figure.py` on the plan's `report_inputs` and `report_params`; the names of the plan's `OWN_RULES` have
# rules of their own in its rule file), and one named target per training run (`<paper>_<run>`: the training and
# every result of it a table or figure reads).
#   snakemake -c2 results/tables/p4/table1.csv     one table (runs what it reads)
#   snakemake -c2 p1_bda                           one run's training and every evaluation of it


for _plan in (paper_plan(p.name) for p in enabled_papers()):
    _p, _category = _plan.paper, f"Paper {_plan.paper[1:]}"
    _inputs, _spec = report_rule_args(_plan, "table")

    rule:
        name:
            f"{_p}_table"
        input:
            unpack(_inputs),
        output:
            csv=report(
                f"{RESULTS}/tables/{_p}/{{table}}.csv",
                caption=f"../report/{_p}_tables.rst",
                category=_category,
                subcategory="Tables",
            ),
            md=f"{RESULTS}/tables/{_p}/{{table}}.md",
        params:
            spec=_spec,
            paper=_p,  # names the script (a `script:` path is formatted when the job runs, after the loop)
        wildcard_constraints:
            table=wildcard_choice(_plan.shared_rule_names("table")),
        log:
            f"{LOGS}/tables/{_p}_{{table}}.log",
        benchmark:
            f"{RESULTS}/benchmarks/{_p}/tables/{{table}}.tsv"
        localrule: True
        script:
            "../scripts/{params.paper}_table.py"

    if _plan.shared_rule_names("figure"):
        _inputs, _spec = report_rule_args(_plan, "figure")

        rule:
            name:
                f"{_p}_figure"
            input:
                unpack(_inputs),
            output:
                png=report(
                    f"{RESULTS}/figures/{_p}/{{figure}}.png",
                    caption=f"../report/{_p}_figures.rst",
                    category=_category,
                    subcategory="Figures",
                ),
                pdf=f"{RESULTS}/figures/{_p}/{{figure}}.pdf",
            params:
                spec=_spec,
                paper=_p,
            wildcard_constraints:
                figure=wildcard_choice(_plan.shared_rule_names("figure")),
            log:
                f"{LOGS}/figures/{_p}_{{figure}}.log",
            benchmark:
                f"{RESULTS}/benchmarks/{_p}/figures/{{figure}}.tsv"
            localrule: True
            script:
                "../scripts/{params.paper}_figure.py"

    # Its trainings through the submitit launcher (`mtp_core.train.launch`, cluster from config `launcher`): a local
    # rule that submits the job and waits, so its `benchmark:` times the wait (the training itself when local; the
    # launcher records the job's own cost in train.json.cost.json). Declared outputs are only the launcher's record
    # and the final model: Snakemake deletes the outputs of a killed job, and the resumable states (checkpoints/),
    # the step exports and train.json.job.json (which the launcher re-attaches to after a restart) must survive.
    if _plan.TRAIN_METHOD:
        _t = training_rule_args(_plan)

        rule:
            name:
                f"{_p}_train"
            input:
                unpack(_t.inputs),
            output:
                record=_plan.train_record("{run}"),
                model=directory(_plan.final_model("{run}")),
            params:
                settings=_t.settings,  # a rerun trigger
                run_dir=_t.run_dir,
                python=PYTHON,
            wildcard_constraints:
                run=wildcard_choice(_plan.trainings()),
            log:
                f"{LOGS}/{_p}/train/{{run}}.log",
            benchmark:
                f"{RESULTS}/benchmarks/{_p}/train/{{run}}.tsv"
            localrule: True
            threads: training_threads(_t.launcher)
            resources:  # where and how it trains: moving it to another cluster or partition must not retrain it
                submitit_jobs=1,
                launcher=_t.launcher_json,
            shell:
                f"{{params.python}} -m mtp_core.cli train --method {_plan.TRAIN_METHOD} --output {{output.record}}"
                " --run-dir {params.run_dir} --settings {params.settings} --launcher {resources.launcher} > {log} 2>&1"

    for _run in _plan.run_names():

        rule:
            name:
                f"{_p}_{_run}"
            input:
                _plan.run_results(_run),
            localrule: True
