#!/usr/bin/env bash
# The live-engine suite: builds its environment (live/setup.sh: SGLang 0.5.23 on CPU, 0.5.22's
# code, Mooncake, a tiny model) unless it is built, then runs live/ with pytest. The tests start
# and stop their own SGLang servers, by process group, and leave nothing running.
#
#   live/run.sh [pytest args...]
#   env: PYTHON (the project's test venv python; default `python`),
#        SGLANG_ENVELOPE_LIVE (the environment's directory; default ~/.cache/sglang-envelope-live),
#        LIVE_DEFAULT_URL / LIVE_INCREMENTAL_URL / LIVE_SKIP_TOKENIZER_URL / LIVE_0_5_22_URL
#        (running servers to use instead of starting them), LIVE_FUZZ_COUNT (200)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-python}
export SGLANG_ENVELOPE_LIVE=${SGLANG_ENVELOPE_LIVE:-$HOME/.cache/sglang-envelope-live}

if ! "$root/live/setup.sh" "$SGLANG_ENVELOPE_LIVE"; then
  echo "live/run.sh: the live environment cannot be built in $SGLANG_ENVELOPE_LIVE (see above)" >&2
  exit 1
fi
"$py" -c 'import httpx' 2>/dev/null || "$py" -m pip install -q --disable-pip-version-check httpx
"$py" -c 'import pytest, hypothesis, sglang_envelope' || {
  echo "live/run.sh: $py needs the project installed with its test extra: pip install '.[test]'" >&2
  exit 1
}
cd "$root"
exec "$py" -m pytest live -p no:cacheprovider "$@"
