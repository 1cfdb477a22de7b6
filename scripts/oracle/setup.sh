#!/usr/bin/env bash
# Builds a CPU-only virtual environment in which SGLang 0.5.23's own request
# validator (GenerateReqInput) and response encoders (tokenizer_manager) import,
# and beside it the code of the two releases before it (0.5.21, 0.5.22) in
# DIR/releases/VERSION: put one first on PYTHONPATH to run that release instead.
# The fixture scripts of scripts/ run their SGLang side with its interpreter (DIR/bin/python),
# and so do verdict.py and flat_fields.py beside this file.
# Usage: setup.sh [DIR]   (default: /tmp/sglang-oracle). Idempotent; takes a few
# minutes and about 6 GB of disk. Everything comes from the package registries
# (torch and torchvision from this machine's local copies where present).
set -euo pipefail
dir=${1:-/tmp/sglang-oracle}
releases="0.5.21 0.5.22"
add_releases() {
  for v in $releases; do
    [ -f "$dir/releases/$v/sglang/srt/managers/io_struct.py" ] && continue
    "$dir/bin/python" -m pip -q --disable-pip-version-check install --no-deps \
      --target "$dir/releases/$v" "sglang==$v"
    PYTHONPATH="$dir/releases/$v" "$dir/bin/python" -W ignore -c \
      'from sglang.srt.managers.io_struct import GenerateReqInput; import sglang.srt.managers.tokenizer_manager'
  done
}
if [ -x "$dir/bin/python" ] && "$dir/bin/python" -c 'import sglang.srt.managers.tokenizer_manager' >/dev/null 2>&1; then
  add_releases
  echo "$dir: ready"; exit 0
fi
python3 -m venv "$dir"
pip="$dir/bin/python -m pip -q --disable-pip-version-check"
$pip install 'torch==2.14.1' 'torchvision==0.29.1'
$pip install --no-deps 'sglang==0.5.23'
$pip install msgspec numpy pyzmq pydantic pybase64 orjson psutil requests packaging pillow \
  starlette tqdm IPython aiohttp 'transformers==5.19.0' dill 'apache-tvm-ffi==0.1.11' \
  sentencepiece 'compressed-tensors==0.18.0' gguf 'openai==2.8.0' partial_json_parser \
  fastapi uvloop uvicorn einops triton python-multipart 2>&1 | grep -v -e 'requires' -e "dependency resolver" || true
"$dir/bin/python" -W ignore -c 'from sglang.srt.managers.io_struct import GenerateReqInput; import sglang.srt.managers.tokenizer_manager'
add_releases
echo "$dir: ready"
