# Foundation decoding runs of the base model: every configured decoder on every prompt set (speed and
# acceptance, measured with the bench protocol) and on every lm-eval task (metrics + decode statistics).
# One job loads the model once and runs all decoders, writing one result file per decoder.


rule decode_prompts:
    input:
        unpack(lambda wc: {"model": model_input(wc.model), "prompts": prompt_file(wc.prompt_set)}),
    output:
        results=expand(
            decode_prompts_result("{{model}}", "{{prompt_set}}", "{decoder}"),
            decoder=list(config["decoding"]["decoders"]),
        ),
    params:
        decoders=config["decoding"]["decoders"],
        settings={k: v for k, v in config["decoding"].items() if k in ("max_new_tokens", "batch_size")},
        bench={k: config["bench"][k] for k in BENCH_KEYS},
    wildcard_constraints:
        model=wildcard_choice([config["decoding"]["model"]]),
        prompt_set=wildcard_choice(config["decoding"]["prompt_sets"]),
    log:
        f"{LOGS}/decode_prompts/{{model}}/{{prompt_set}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/decode_prompts/{{model}}/{{prompt_set}}.tsv"
    threads: bench_threads(config["bench"])
    script:
        "../scripts/decode_prompts.py"


rule evaluate:
    input:
        unpack(eval_inputs),
    output:
        results=expand(
            decode_result("{{model}}", "{{task}}", "{decoder}"), decoder=list(config["evaluation"]["decoders"])
        ),
    params:
        model=lambda wc: wc.model,
        task=lambda wc: wc.task,
        decoders=config["evaluation"]["decoders"],
    wildcard_constraints:
        model=wildcard_choice([config["evaluation"]["model"]]),
        task=wildcard_choice(config["evaluation"]["tasks"]),
    log:
        f"{LOGS}/evaluate/{{model}}/{{task}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/evaluate/{{model}}/{{task}}.tsv"
    threads: config["threads"]
    script:
        "../scripts/evaluate.py"
