#!/usr/bin/env bash
# The prepared check for a lent GPU (docs/development.md "GPU checks"): one call, on the checkout alone.
#   installs the wheels of .whl/ (`make gpu-wheels` here; carried with the call) over the image's packages, prints
#   the versions, then runs benchmarks/decode_costs.py at the papers' shapes in bf16 with seeded random weights:
#   Qwen3-4B first (issue 34's targets), then Llama-7B; compiled sections only while GPU_CHECK_COMPILE_S seconds
#   have not passed, eager ones after. Results go to $OUT (the device tool's folder; else benchmarks/results),
#   written after every section, with the log beside them. Extra arguments go to decode_costs.py (later wins):
#   GPU_CHECK_PYTHON=.venv/bin/python GPU_CHECK_COMPILE_S=0 bash benchmarks/gpu_check.sh --device cpu \
#       --dtype float32 --shapes smollm2-135m --prompts 1 --prompt-tokens 16 --new-tokens 4 --rows 1 2 \
#       --sections speed dmtd   # a dry run on the CPU
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results}
mkdir -p "$OUT"
PY=${GPU_CHECK_PYTHON:-python3}
if [ -d .whl ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || { echo "gpu_check: installing .whl/ failed" >&2; exit 1; }
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
"$PY" -c "import platform, torch, transformers; print('gpu_check: python', platform.python_version(), 'torch',
torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available() and
torch.cuda.get_device_name(0))" || exit 1
"$PY" benchmarks/decode_costs.py --device cuda --dtype bfloat16 --shapes qwen3-4b llama-7b \
    --eager-only-after "${GPU_CHECK_COMPILE_S:-360}" --commit "${GPU_CHECK_COMMIT:-unknown}" --out "$OUT" "$@" \
    2>&1 | tee "$OUT/gpu_check.log"
