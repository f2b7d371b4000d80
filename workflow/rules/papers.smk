# The rules every enabled paper shares, read from its plan (`mtp_core.config.plan.PaperPlan`): one for its
# trainings (`<paper>_train`, method `TRAIN_METHOD`), one for its tables and one for its figures (`<paper>_table`,
# `<paper>_figure`: a local job of pandas or matplotlib running `workflow/scripts/<paper>_table.py` /
# `<paper>_figure.py` on the plan's `report_inputs` and `report_params`; the names of the plan's `OWN_RULES` have
# rules of their own in its rule file), and one named target per training run (`<paper>_<run>`, the training and
# every result of it a table or figure reads).
#   snakemake -c2 results/tables/p4/table1.csv     one table (runs what it reads)
#   snakemake -c2 p1_bda                           one run's training and every evaluation of it
#
# The rules are declared in a function called once per paper, so that every rule's lambdas, shell command and
# script path see that paper's plan: a shell command or script path is evaluated again when its job runs, which
# in a loop at module level would see the last paper's.


def declare_paper_rules(plan):
    p, category = plan.paper, f"Paper {plan.paper[1:]}"

    # Its trainings through the submitit launcher (`mtp_core.train.launch`, cluster from config `launcher`), each a
    # local job that submits the training and waits, so that its benchmark file times the wait (the training itself
    # when local; the launcher records the job's own cost in train.json.cost.json). Declared outputs are only the
    # launcher's record and the final model: Snakemake deletes the outputs of a killed job, and the resumable
    # states (checkpoints/), the step exports and train.json.job.json (which the launcher re-attaches to after a
    # restart) must survive.
    if plan.TRAIN_METHOD:

        rule:
            name:
                f"{p}_train"
            input:
                unpack(lambda wc: plan.train_inputs(wc.run)),
            output:
                record=plan.train_record("{run}"),
                model=directory(plan.final_model("{run}")),
            params:
                settings=lambda wc: shell_json(plan.run_settings(wc.run)),  # a rerun trigger
                run_dir=lambda wc: plan.training_dir(wc.run),
                python=PYTHON,
            wildcard_constraints:
                run=wildcard_choice(plan.trainings()),
            log:
                f"{LOGS}/{p}/train/{{run}}.log",
            benchmark:
                f"{RESULTS}/benchmarks/{p}/train/{{run}}.tsv"
            localrule: True
            priority: TRAINING_PATH_PRIORITY
            threads: training_threads(lambda wc: plan.launcher_settings(wc.run), lambda wc: plan.run_settings(wc.run))
            resources:  # where and how it trains: moving it to another cluster or partition must not retrain it
                submitit_jobs=1,
                launcher=lambda wc: shell_json(plan.launcher_settings(wc.run)),
            shell:
                f"{{params.python}} -m mtp_core.cli train --method {plan.TRAIN_METHOD} --output {{output.record}}"
                " --run-dir {params.run_dir} --settings {params.settings} --launcher {resources.launcher} > {log} 2>&1"

    rule:
        name:
            f"{p}_table"
        input:
            unpack(lambda wc: plan.report_inputs(wc.table)),
        output:
            csv=report(
                f"{RESULTS}/tables/{p}/{{table}}.csv",
                caption=f"../report/{p}_tables.rst",
                category=category,
                subcategory="Tables",
            ),
            md=f"{RESULTS}/tables/{p}/{{table}}.md",
        params:
            spec=lambda wc: plan.report_params(wc.table),
        wildcard_constraints:
            table=wildcard_choice(plan.shared_rule_names("table")),
        log:
            f"{LOGS}/tables/{p}_{{table}}.log",
        benchmark:
            f"{RESULTS}/benchmarks/{p}/tables/{{table}}.tsv"
        localrule: True
        script:
            f"../scripts/{p}_table.py"

    if plan.shared_rule_names("figure"):

        rule:
            name:
                f"{p}_figure"
            input:
                unpack(lambda wc: plan.report_inputs(wc.figure)),
            output:
                png=report(
                    f"{RESULTS}/figures/{p}/{{figure}}.png",
                    caption=f"../report/{p}_figures.rst",
                    category=category,
                    subcategory="Figures",
                ),
                pdf=f"{RESULTS}/figures/{p}/{{figure}}.pdf",
            params:
                spec=lambda wc: plan.report_params(wc.figure),
            wildcard_constraints:
                figure=wildcard_choice(plan.shared_rule_names("figure")),
            log:
                f"{LOGS}/figures/{p}_{{figure}}.log",
            benchmark:
                f"{RESULTS}/benchmarks/{p}/figures/{{figure}}.tsv"
            localrule: True
            script:
                f"../scripts/{p}_figure.py"

    for run in plan.run_names():

        rule:
            name:
                f"{p}_{run}"
            input:
                plan.run_results(run),
            localrule: True


for _paper in enabled_papers():
    declare_paper_rules(paper_plan(_paper.name))
