"""Download snakemake.params.url to snakemake.output[0] atomically (paper scale; the cluster has internet)."""

import logging
import shutil
import urllib.request

from mtp_core.io import atomic_path, log_to_file

smk = snakemake
log_to_file(smk.log[0])
logging.info("downloading %s", smk.params.url)
with (
    urllib.request.urlopen(smk.params.url, timeout=120) as response,
    atomic_path(smk.output[0]) as tmp,
    open(tmp, "wb") as f,
):
    shutil.copyfileobj(response, f)
logging.info("wrote %s", smk.output[0])
