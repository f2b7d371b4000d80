# Data preparation: math datasets (synthetic MetaMathQA-style or MetaMathQA + GSM8K test) with their
# seed-grouped split, the training rows of conversation datasets, pretraining token shards (paper 2), and the
# prompt sets of the decoding benchmarks.


rule prepare_math:
    input:
        lambda wc: dataset_local_inputs(wc.dataset),
    output:
        train=math_split("{dataset}", "train"),
        validation=math_split("{dataset}", "validation"),
        test=math_split("{dataset}", "test"),
        report=f"{RESULTS}/data/{{dataset}}/split_report.json",
    params:
        spec=lambda wc: config["datasets"][wc.dataset],
        seed=config["seed"],
        on_bad_row=lambda wc: dataset_on_bad_row(wc.dataset),
    wildcard_constraints:
        dataset=wildcard_choice(datasets_of_kind("synthetic_math", "metamathqa")),
    log:
        f"{LOGS}/data/prepare_math/{{dataset}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/data/prepare_math/{{dataset}}.tsv"
    priority: TRAINING_PATH_PRIORITY
    threads: 1
    resources:
        mem_mb=4000 if SCALE != "paper" else 16000,
    script:
        "../scripts/prepare_math.py"


# The (query, response) rows a training on a conversation dataset reads (fine-tunes, paper 1's Magpie run):
# the first user/assistant turn pair of each conversation.
rule chat_rows:
    input:
        lambda wc: dataset_local_inputs(wc.dataset),
    output:
        train=train_data_path("{dataset}"),
        report=f"{RESULTS}/data/{{dataset}}/train_rows_report.json",
    params:
        spec=lambda wc: config["datasets"][wc.dataset],
        on_bad_row=lambda wc: dataset_on_bad_row(wc.dataset),
    wildcard_constraints:
        dataset=wildcard_choice(datasets_of_kind("sharegpt")),
    log:
        f"{LOGS}/data/chat_rows/{{dataset}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/data/chat_rows/{{dataset}}.tsv"
    priority: TRAINING_PATH_PRIORITY
    threads: 1
    resources:
        mem_mb=4000 if SCALE != "paper" else 32000,
    script:
        "../scripts/chat_rows.py"


rule prepare_shards:
    input:
        unpack(
            lambda wc: {
                "tokenizer": model_input(config["datasets"][wc.dataset]["tokenizer"]),
                "text": dataset_local_inputs(wc.dataset),
                **pretrain_rows_input(wc.dataset),
            }
        ),
    output:
        index=shard_index("{dataset}"),
    params:
        spec=lambda wc: config["datasets"][wc.dataset],
        model=lambda wc: model_spec(config, config["datasets"][wc.dataset]["tokenizer"]),
        model_dir=lambda wc: model_dir(config["datasets"][wc.dataset]["tokenizer"]),
        seed=config["seed"],
        on_bad_row=lambda wc: dataset_on_bad_row(wc.dataset),
    wildcard_constraints:
        dataset=wildcard_choice(datasets_of_kind("pretrain_text")),
    log:
        f"{LOGS}/data/prepare_shards/{{dataset}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/data/prepare_shards/{{dataset}}.tsv"
    priority: TRAINING_PATH_PRIORITY
    threads: config["threads"]
    resources:
        mem_mb=4000 if SCALE != "paper" else 32000,
    script:
        "../scripts/prepare_shards.py"


rule prepare_prompts:
    input:
        unpack(prompt_set_inputs),
    output:
        prompts=prompt_file("{prompt_set}"),
        report=f"{RESULTS}/prompts/{{prompt_set}}.report.json",
    params:
        name=lambda wc: wc.prompt_set,
        spec=lambda wc: config["prompt_sets"][wc.prompt_set],
        seed=config["seed"],
        on_bad_row=lambda wc: prompt_set_on_bad_row(wc.prompt_set),
    wildcard_constraints:
        prompt_set=wildcard_choice(config["prompt_sets"]),
    log:
        f"{LOGS}/data/prepare_prompts/{{prompt_set}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/data/prepare_prompts/{{prompt_set}}.tsv"
    threads: 1
    resources:
        mem_mb=4000,
    script:
        "../scripts/prepare_prompts.py"


# A prompt file with a `url` (Spec-Bench's question.jsonl at paper scale) is downloaded once when missing.
for _name, _ps in config["prompt_sets"].items():
    if _ps["source"] == "jsonl" and _ps.get("url"):

        rule:
            name:
                f"fetch_prompts_{_name}"
            input:
                hub_mirror.inputs(config, _ps["url"]),
            output:
                _ps["path"],
            params:
                url=_ps["url"],
            log:
                f"{LOGS}/data/fetch_prompts/{_name}.log",
            localrule: True
            script:
                "../scripts/fetch_url.py"
