#!/usr/bin/env bash
# Builds the live-engine suite's environment from the Python package index alone (plus Debian's
# libibverbs1 for Mooncake): a venv with SGLang 0.5.23 on CPU, SGLang 0.5.22's code beside it
# (pip --target, for the other-release checks), Mooncake's CPU wheel for the prefill/decode pair,
# and two tiny random models with a byte-level BPE tokenizer (vocabulary 320), made offline: a
# GPT-2 and a Mixture-of-Experts model (Mixtral, 2 layers, 4 experts, top-2); and NVIDIA Dynamo 1.6.1
# beside SGLang (its worker and frontend, pip --target).
# Idempotent: a built directory answers `ready` at once. Fails loudly if anything cannot be built.
#
#   live/setup.sh [DIR]     DIR defaults to $SGLANG_ENVELOPE_LIVE or ~/.cache/sglang-envelope-live
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-${SGLANG_ENVELOPE_LIVE:-$HOME/.cache/sglang-envelope-live}}
py=${PYTHON:-python3}
mkdir -p "$dir"
stamp="$dir/.ready-3"

# Mooncake's engine links libibverbs (a system library, so checked on every run: a built
# directory may be on a machine without it). grep reads all of ldd's output: `grep -q` would
# stop at the first match, ldd would die of SIGPIPE, and pipefail would call it no match.
ibverbs() {
  local engine="$dir/mooncake/mooncake/engine.so"
  if [ -f "$engine" ] && ldd "$engine" | grep 'libibverbs.so.1 => not found' >/dev/null; then
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
      apt-get update -qq && apt-get install -y -qq libibverbs1 >/dev/null
    else
      echo "live/setup.sh: Mooncake needs libibverbs.so.1 (Debian: apt-get install libibverbs1)" >&2
      exit 1
    fi
  fi
}

# NVIDIA Dynamo 1.6.1 beside SGLang, for its worker and frontend (live/dynamo_host.py): --no-deps, since
# its requirements pull CUDA pieces it does not need here; redis and blake3 are the only imports
# missing on this path. Installed once (a directory built before it gets it here too).
dynamo() {
  [ -f "$dir/dynamo/site/dynamo/sglang/main.py" ] || \
    "$dir/venv/bin/python" -m pip -q --disable-pip-version-check install --no-deps \
      --target "$dir/dynamo/site" \
      'ai-dynamo==1.6.1' 'ai-dynamo-runtime==1.6.1' 'redis==8.2.0' 'blake3==1.0.11'
}

# The models, each made once (a directory built before the MoE model gets it here too).
models() {
  # Made again (the same, from the same seed) where the tokenizer has no chat template yet.
  grep -q chat_template "$dir/tiny-gpt2/tokenizer_config.json" 2>/dev/null || \
    HF_HUB_OFFLINE=1 "$dir/venv/bin/python" "$here/make_model.py" "$dir/tiny-gpt2"
  grep -q chat_template "$dir/tiny-moe/tokenizer_config.json" 2>/dev/null || \
    HF_HUB_OFFLINE=1 "$dir/venv/bin/python" "$here/make_model.py" "$dir/tiny-moe" --moe
}

if [ -f "$stamp" ] && [ -x "$dir/venv/bin/python" ]; then
  ibverbs; models; dynamo; echo "$dir: ready"; exit 0
fi

[ -x "$dir/venv/bin/python" ] || "$py" -m venv "$dir/venv"
pip="$dir/venv/bin/python -m pip -q --disable-pip-version-check"
# torch 2.14.1 and torchvision 0.29.1 are the releases this machine kind keeps on disk for Python 3.11.
$pip install 'torch==2.14.1' 'torchvision==0.29.1'
$pip install --no-deps 'sglang==0.5.23'
# SGLang's runtime imports, pinned where a newer release breaks 0.5.23 on CPU.
$pip install msgspec numpy pyzmq pydantic pybase64 orjson psutil requests packaging pillow \
  starlette tqdm IPython aiohttp 'transformers==5.19.0' 'tokenizers==0.23.2' dill 'apache-tvm-ffi==0.1.11' \
  'sentencepiece==0.2.1' 'compressed-tensors==0.18.0' gguf 'openai==2.8.0' partial_json_parser \
  fastapi uvloop 'uvicorn>=0.51' einops 'triton==3.8.0' python-multipart setproctitle prometheus-client \
  interegular xxhash zstandard watchfiles scipy regex 'xgrammar==0.2.7' 'llguidance>=1.7.6,<2' blobfile==3.0.0 \
  'numba==0.65.1' nvidia-ml-py py-spy anthropic easydict ninja 'python-dateutil<3' tiktoken jsonschema \
  'soundfile==0.13.1' 2>&1 | { grep -v -e 'requires' -e 'dependency resolver' -e WARNING || true; }
"$dir/venv/bin/python" -W ignore -c \
  'import sglang.srt.entrypoints.http_server, sglang.srt.managers.scheduler, sglang.srt.models.gpt2'

# SGLang 0.5.22's code only, for checks of another release's request code.
[ -f "$dir/sglang-0.5.22/sglang/version.py" ] || \
  $pip install --no-deps --target "$dir/sglang-0.5.22" 'sglang==0.5.22'

# Mooncake's CPU transfer engine for the prefill/decode pair; its engine links libibverbs even for TCP.
[ -f "$dir/mooncake/mooncake/engine.so" ] || \
  $pip install --no-deps --target "$dir/mooncake" 'mooncake-transfer-engine-non-cuda==0.3.13.post1'
ibverbs

models
dynamo
touch "$stamp"
echo "$dir: ready"
