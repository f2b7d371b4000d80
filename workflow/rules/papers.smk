# The rules every enabled paper shares, read from its plan (`mtp_core.config.plan.PaperPlan`): one rule for its
# tables and one for its figures (`<paper>_table`, `<paper>_figure`: a local job of pandas or matplotlib running
# `workflow/scripts/<paper>_table.py` / `<paper>_figure.py` on the plan's `report_inputs` and `report_params`;
# the names of the plan's `OWN_RULES` have rules of their own in its rule file), and one named target per training
# run (`<paper>_<run>`: the training and every result of it a table or figure reads).
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
        wildcard_constraints:
            table=wildcard_choice(_plan.shared_rule_names("table")),
        log:
            f"{LOGS}/tables/{_p}_{{table}}.log",
        benchmark:
            f"{RESULTS}/benchmarks/{_p}/tables/{{table}}.tsv"
        localrule: True
        script:
            f"../scripts/{_p}_table.py"

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
            wildcard_constraints:
                figure=wildcard_choice(_plan.shared_rule_names("figure")),
            log:
                f"{LOGS}/figures/{_p}_{{figure}}.log",
            benchmark:
                f"{RESULTS}/benchmarks/{_p}/figures/{{figure}}.tsv"
            localrule: True
            script:
                f"../scripts/{_p}_figure.py"

    for _run in _plan.run_names():

        rule:
            name:
                f"{_p}_{_run}"
            input:
                _plan.run_results(_run),
            localrule: True
