# Paper 2: MTP-D, cascaded MTP heads with Top-N KL self-distillation.
# The frozen trunk's feature cache, head trainings (the MTP / MTP-D runs, ablations and looped extensions), greedy
# references per trunk, AR / CAR per run from the teacher-forced simulation, the speed experiments (bench protocol)
# and Tables 1-8, Figures 3-7, 9-14. Every name comes from the paper's plan (`mtp_core.papers.p2.plan`).
#   snakemake -c2 results/tables/p2/table2.csv     one table (trains and evaluates the runs it shows)
#   snakemake -c2 p2_mtpd_k4                        one run: its training and every evaluation of it

P2 = paper_plan("p2")


# The frozen trunk's hidden states on the training windows, once for every run that reads them.
rule p2_features:
    input:
        unpack(with_wildcards(P2.feature_inputs)),
    output:
        directory(P2.feature_dir("{key}")),
    params:
        spec=lambda wc: P2.feature_keys()[wc.key],
        model=lambda wc: P2.feature_keys()[wc.key]["model"],
    wildcard_constraints:
        key=wildcard_choice(list(P2.feature_keys())),
    log:
        f"{LOGS}/p2/features/{{key}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/p2/features/{{key}}.tsv"
    priority: TRAINING_PATH_PRIORITY
    threads: config["threads"]
    script:
        "../scripts/p2_features.py"


# Greedy continuations of every prompt set from one trunk, past the budget (the simulation's last step), and the
# main head's Top-N mass on the validation windows (Fig. 6).
rule p2_reference:
    input:
        unpack(with_wildcards(P2.reference_inputs)),
    output:
        results=[P2.reference_path("{main}", ps) for ps in P2.s.prompt_sets],
        topn_csv=P2.topn_path("{main}", "csv"),
        topn=P2.topn_path("{main}", "json"),
    params:
        prompt_sets=P2.s.prompt_sets,
        windows=with_wildcards(P2.windows_spec),
        settings={"max_new_tokens": P2.s.max_new_tokens, "reference_extra_tokens": P2.s.reference_extra_tokens},
    wildcard_constraints:
        main=wildcard_choice(P2.mains()),
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
        unpack(with_wildcards(P2.acceptance_inputs)),
    output:
        results=P2.acceptance_outputs("{run}"),
        validation=P2.validation_path("{run}"),
    params:
        depths=P2.depths(),
        prompt_sets=P2.s.prompt_sets,
        main=with_wildcards(P2.main_of),
        heads=with_wildcards(P2.heads_path),
        method=lambda wc: P2.run(wc.run).method,
        windows=lambda wc: P2.windows_spec(P2.main_of(wc.run)),
        max_new_tokens=P2.s.max_new_tokens,
        base=with_wildcards(P2.base_of),
    wildcard_constraints:
        run=wildcard_choice(P2.run_names()),
    log:
        f"{LOGS}/p2/acceptance/{{run}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/p2/acceptance/{{run}}.tsv"
    threads: config["threads"]
    script:
        "../scripts/p2_acceptance.py"


# One bench per speed experiment (Figs 4, 5 and 8, Table 8): greedy and its mtp-spec rows side by side, under each
# decoding protocol (with a KV cache; without one, App. D's).
for _exp in P2.speed_experiments():

    rule:
        name:
            f"p2_speed_{_exp}"
        input:
            **P2.speed_inputs(_exp),
        output:
            results=P2.speed_outputs(_exp),
        params:
            experiment=_exp,
            trunks=P2.speed_trunks(_exp),
            decoders=P2.speed_decoders(_exp),
            refs=P2.speed_refs(_exp),
            prompt_sets=P2.s.prompt_sets,
            speed=vars(P2.s.speed),
            bench=P2.bench_settings(),
        log:
            f"{LOGS}/p2/speed/{_exp}.log",
        benchmark:
            f"{RESULTS}/benchmarks/p2/speed/{_exp}.tsv"
        threads: bench_threads(P2.bench_settings())
        script:
            "../scripts/p2_speed.py"
