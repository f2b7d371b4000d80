# Base models that need materialising once: the packaged GGUF (dequantised to an HF checkpoint, ~20 s) and
# tiny random configs. Hub and local models are loaded where they are and have no rule.


rule prepare_model:
    output:
        directory(f"{RESULTS}/models/base/{{model}}"),
    params:
        spec=lambda wc: model_spec(config, wc.model),
    wildcard_constraints:
        model=wildcard_choice(prepared_models()),
    log:
        f"{LOGS}/prepare_model/{{model}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/prepare_model/{{model}}.tsv"
    threads: 1
    script:
        "../scripts/prepare_model.py"
