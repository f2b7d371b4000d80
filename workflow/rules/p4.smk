# Paper 4: Direct Multi-Token Decoding. Trainings with cyclical masking
# (the main E0D8 MTD3 and the runs of Tables 1, 2, 4), one evaluation job per label and τ (teacher-forced scores per
# cycle offset on the held-out split and every lm-eval task), the speed job (Table 3, Fig. 4),
# the leaderboard's τ choice, Tables 1-5 and Figures 4-5. Every name comes from the paper's plan
# (`mtp_core.papers.p4.plan`).
#   snakemake -c2 results/tables/p4/table5.csv     one table (trains and evaluates what it shows)
#   snakemake -c2 p4_mtd4                          one run: its training and every evaluation a table reads

P4 = paper_plan("p4")
P4_LABELS = P4.label_taus()


# Evaluation: one job per (label, τ) (and one per start model, "Vanilla"): the model loads once, then the
# teacher-forced scores on the held-out split and every task; uniform outputs, so that the slurm profile can give
# the rule a GPU and paper scale runs the settings in parallel.
rule p4_evaluate:
    input:
        unpack(lambda wc: P4.eval_inputs(wc.label)),
    output:
        results=P4.eval_outputs("{label}", "{tau}"),
    params:
        spec=lambda wc: P4.eval_params(wc.label, wc.tau),
    wildcard_constraints:
        label=wildcard_choice([lab for lab in P4_LABELS if P4.parse_label(lab)[0] != "vanilla"]),
        tau=r"\d+",
    log:
        f"{LOGS}/p4/evaluate/{{label}}/tau{{tau}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/p4/evaluate/{{label}}/tau{{tau}}.tsv"
    threads: config["threads"]
    script:
        "../scripts/p4_evaluate.py"


rule p4_vanilla:
    input:
        unpack(lambda wc: P4.eval_inputs(f"{wc.model}@step0")),
    output:
        results=P4.eval_outputs("{model}@step0", None),
    params:
        spec=lambda wc: P4.eval_params(f"{wc.model}@step0", None),
    wildcard_constraints:
        model=wildcard_choice(sorted({P4.label_model(lab) for lab in P4_LABELS})),
    log:
        f"{LOGS}/p4/evaluate/{{model}}@step0.log",
    benchmark:
        f"{RESULTS}/benchmarks/p4/evaluate/{{model}}@step0.tsv"
    threads: config["threads"]
    script:
        "../scripts/p4_evaluate.py"


# Table 3 / Figure 4: random prompts, greedy and dmtd at each τ side by side per batch size (bench protocol), and
# the measured layer costs (modeled speed-up).
if P4.s.speed.run:

    rule p4_speed:
        input:
            weights=P4.final_model(P4.s.speed.run),
        output:
            results=[f for files in P4.speed_outputs().values() for f in files],
            layer_costs=list(P4.layer_costs().values()),
        params:
            spec=P4.speed_params(),
        log:
            f"{LOGS}/p4/speed.log",
        benchmark:
            f"{RESULTS}/benchmarks/p4/speed.tsv"
        threads: bench_threads(P4.bench_settings())
        script:
            "../scripts/p4_speed.py"


# The leaderboard's second row: the fastest τ keeping the retention threshold on the held-out split.
if P4.s.leaderboard.run and P4.s.leaderboard.selected:

    rule p4_select_tau:
        input:
            P4.select_params()["files"],
        output:
            P4.selected_tau_path(P4.s.leaderboard.run),
        params:
            spec=P4.select_params(),
        log:
            f"{LOGS}/p4/select_tau.log",
        localrule: True
        script:
            "../scripts/p4_select_tau.py"


rule p4_figure5:
    input:
        records=P4.fig5_inputs(),
    output:
        png=report(
            f"{RESULTS}/figures/p4/fig5.png",
            caption="../report/p4_figures.rst",
            category="Paper 4",
            subcategory="Figures",
        ),
        pdf=f"{RESULTS}/figures/p4/fig5.pdf",
        fit=P4.fig5_fit_path(),
    params:
        spec=P4.report_params("fig5"),
    log:
        f"{LOGS}/figures/p4_fig5.log",
    benchmark:
        f"{RESULTS}/benchmarks/p4/figures/fig5.tsv"
    localrule: True
    script:
        "../scripts/p4_figure.py"
