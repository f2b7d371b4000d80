# Base models that need materialising once: the packaged GGUF (dequantised to an HF checkpoint, ~20 s), tiny random
# configs and scratch models (random weights of a declared architecture, another model's tokenizer). Hub and local
# models are loaded where they are and have no rule.


rule prepare_model:
    input:
        lambda wc: model_input(config["models"][wc.model]["tokenizer"]) if "tokenizer" in config["models"][wc.model] else [],
    output:
        directory(f"{RESULTS}/models/base/{{model}}"),
    params:
        spec=lambda wc: model_spec(config, wc.model),
        tokenizer=lambda wc: model_plan.tokenizer_location(config, wc.model) if "tokenizer" in config["models"][wc.model] else None,
    wildcard_constraints:
        model=wildcard_choice(prepared_models()),
    log:
        f"{LOGS}/prepare_model/{{model}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/prepare_model/{{model}}.tsv"
    priority: TRAINING_PATH_PRIORITY
    threads: 1
    script:
        "../scripts/prepare_model.py"


finetune_threads = training_threads(
    lambda wc: model_plan.launcher_settings(config, wc.model), lambda wc: finetune.finetune_settings(config, wc.model)
)


# Fine-tuned models (`source: finetuned`, mtp_core.models.plan and mtp_core.train.finetune): the base model trained on a dataset's train split
# through the submitit launcher (method sft), like paper 1's trainings: a local rule that submits and waits;
# checkpoints/ and train.json.job.json must survive a killed rule, so only the record and the model are outputs.
rule finetune_model:
    input:
        unpack(finetune_inputs),
    output:
        record=model_plan.finetune_record("{model}"),
        model=directory(f"{RESULTS}/models/finetuned/{{model}}/model"),
    params:
        settings=lambda wc: shell_json(finetune.finetune_settings(config, wc.model)),
        run_dir=lambda wc: model_plan.finetune_run_dir(wc.model),
        python=PYTHON,
    wildcard_constraints:
        model=wildcard_choice(model_plan.finetuned_models(config)),
    log:
        f"{LOGS}/finetune_model/{{model}}.log",
    benchmark:  # wall clock of submit + wait (the training itself when local; its own cost: train.json.cost.json)
        f"{RESULTS}/benchmarks/finetune_model/{{model}}.tsv"
    localrule: True
    priority: TRAINING_PATH_PRIORITY
    threads: finetune_threads
    resources:
        submitit_jobs=1,
        launcher=lambda wc: shell_json(model_plan.launcher_settings(config, wc.model)),
    shell:
        "{params.python} -m mtp_core.cli train --method sft --output {output.record} --run-dir {params.run_dir}"
        " --settings {params.settings} --launcher {resources.launcher} > {log} 2>&1"
