"""Write one hub stand-in (rules of workflow/rules/hub_mirror.smk).

snakemake.params.kind   models | heads | datasets | files
snakemake.params.spec   its `hub_mirror.<kind>.<id>` entry
snakemake.input.base    heads: the base model's stand-in folder
snakemake.output[0]     the stand-in folder (or file)
"""

from mtp_core.io import log_to_file

smk = snakemake
log_to_file(smk.log[0])
kind, spec, out = smk.params.kind, dict(smk.params.spec), smk.output[0]
if kind == "models":
    from mtp_core.models.hub.checkpoints import write_model_standin

    write_model_standin(spec, out)
elif kind == "heads":
    from mtp_core.models.hub.heads import write_heads_standin

    write_heads_standin(spec, smk.input.base, out)
elif kind == "datasets":
    from mtp_core.data.hub.datasets import write_dataset_standin

    hub_id = smk.wildcards.hub_id
    write_dataset_standin(hub_id, out, rows=int(spec["rows"]), seed=int(spec["seed"]))
else:
    from mtp_core.data.hub.files import write_file_standin

    write_file_standin(spec, out, seed=int(smk.config["seed"]))
