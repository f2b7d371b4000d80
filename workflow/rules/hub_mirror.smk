# Stand-ins for the hub (config section `hub_mirror`; the rehearsal, config/rehearsal.yaml): tiny models of the
# mirrored models' families, published-layout heads, datasets in their hub repos' layouts, downloaded files; each
# written once into results/hub/ and read by the same loaders (mtp_core.data.hub, mtp_core.models.hub). No mirror: no rule runs.
# Local rules: they stand in for the hub, they are not part of the paper DAG (a few seconds of I/O each).


rule hub_model:
    output:
        directory(hub_mirror_path("models", "{hub_id}")),
    params:
        kind="models",
        spec=lambda wc: hub_entries("models")[wc.hub_id],
    wildcard_constraints:
        hub_id=wildcard_choice(hub_entries("models")),
    log:
        f"{LOGS}/hub_mirror/models/{{hub_id}}.log",
    threads: 1
    localrule: True
    script:
        "../scripts/hub_standin.py"


rule hub_heads:
    input:
        base=lambda wc: hub_mirror_path("models", hub_entries("heads")[wc.hub_id]["base"]),
    output:
        directory(hub_mirror_path("heads", "{hub_id}")),
    params:
        kind="heads",
        spec=lambda wc: hub_entries("heads")[wc.hub_id],
    wildcard_constraints:
        hub_id=wildcard_choice(hub_entries("heads")),
    log:
        f"{LOGS}/hub_mirror/heads/{{hub_id}}.log",
    threads: 1
    localrule: True
    script:
        "../scripts/hub_standin.py"


rule hub_dataset:
    output:
        directory(hub_mirror_path("datasets", "{hub_id}")),
    params:
        kind="datasets",
        spec=lambda wc: hub_entries("datasets")[wc.hub_id],
    wildcard_constraints:
        hub_id=wildcard_choice(hub_entries("datasets")),
    log:
        f"{LOGS}/hub_mirror/datasets/{{hub_id}}.log",
    threads: 1
    localrule: True
    script:
        "../scripts/hub_standin.py"


rule hub_file:
    output:
        hub_mirror_path("files", "{key}"),
    params:
        kind="files",
        spec=lambda wc: {hub_mirror.file_key(u): s for u, s in hub_entries("files").items()}[wc.key],
    wildcard_constraints:
        key=wildcard_choice([hub_mirror.file_key(u) for u in hub_entries("files")]),
    log:
        f"{LOGS}/hub_mirror/files/{{key}}.log",
    threads: 1
    localrule: True
    script:
        "../scripts/hub_standin.py"
