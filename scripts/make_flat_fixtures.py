"""Write tests/fixtures/flat_fields.jsonl: SGLang's own flat top-logprob fields.

Builds a deterministic, varied set of nested top-logprob rows, runs them
through SGLang 0.5.23's `_build_flat_top_logprobs_fields` (by way of the
oracle script `flat_fields.py` in the oracle environment, built by
scripts/oracle/setup.sh) and writes one JSON line per case:

    {"name": ..., "side": ..., "val": ..., "idx": ..., "top_logprobs_num": ...,
     "b64": ..., "expected": <SGLang's fields, or {"error": "ValueError", "message": ...}>}

Non-finite floats are written as Python's json writes them (NaN, Infinity,
-Infinity); read the file with the standard `json` module.

    /tmp/dev/bin/python scripts/make_flat_fixtures.py \
        [--oracle-python PATH] [--oracle-script PATH] [--out PATH]

The defaults come from SGLANG_ORACLE_PYTHON and SGLANG_ORACLE_FLAT_SCRIPT, else
/tmp/sglang-oracle/bin/python and scripts/oracle/flat_fields.py.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

SGLANG_VERSION = "0.5.23"
SEED = 20260523
ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "tests" / "fixtures" / "flat_fields.jsonl"

F32_MAX = 3.4028234663852886e38
# Logprobs at the edges of float32: zeros, subnormals, rounding ties, the
# overflow boundary (3.4028235677973366e38 is the first double that rounds to
# inf), beyond float32, non-finite, and JSON integers.
SPECIAL_VALUES: list[float] = [
    0.0,
    -0.0,
    0,
    -3,
    -0.1,
    -2.302585092994046,
    1.0 + 2.0**-24,  # a tie: rounds down to even
    1.0 + 3 * 2.0**-24,  # a tie: rounds up to even
    2.0**-149,  # the smallest float32 subnormal
    2.0**-150,  # half of it: a tie that rounds to zero
    2.0**-150 * 1.5,  # rounds up to the smallest subnormal
    1e-40,
    -1e-45,
    1.1754943508222875e-38,
    1e-50,
    5e-324,
    -5e-324,
    F32_MAX,
    -F32_MAX,
    3.4028235677973362e38,
    3.4028235677973366e38,
    -3.4028235677973366e38,
    1e39,
    -1e300,
    1.7976931348623157e308,
    16777217,
    2**60 + 1,
    float("inf"),
    float("-inf"),
    float("nan"),
]
INT32_IDS = [0, 1, 151643, 2**31 - 1, -1, -(2**31)]
# numpy raises OverflowError (not ValueError) for these, which the oracle does
# not catch, so they appear only in JSON-list cases, where SGLang copies them.
WIDE_IDS = [2**31, 2**40, -(2**31) - 1, 2**70]

Row = list[float] | None
Case = dict[str, object]


def _case(
    name: str, side: str, val: list[Row], idx: list[list[int] | None], num: int, b64: bool
) -> Case:
    return {"name": name, "side": side, "val": val, "idx": idx, "top_logprobs_num": num, "b64": b64}


def _rows(rng: random.Random, prefix: list[Row], rows: int, k: int) -> list[Row]:
    """`prefix`, then `rows` rows of k descending logprobs."""
    body: list[Row] = [
        sorted((rng.uniform(-30.0, 0.0) for _ in range(k)), reverse=True) for _ in range(rows)
    ]
    return prefix + body


def _ids_like(rng: random.Random, val: list[Row], pool: list[int]) -> list[list[int] | None]:
    """Token ids shaped as `val`: mostly vocabulary-sized, some from `pool`."""
    return [
        None
        if row is None
        else [rng.choice(pool) if rng.random() < 0.3 else rng.randrange(200_000) for _ in row]
        for row in val
    ]


def _prefix(rng: random.Random, length: int) -> list[Row]:
    """A null prefix of None rows, with an empty row now and then."""
    return [[] if rng.random() < 0.25 else None for _ in range(length)]


def _chunk(values: list[float], k: int) -> list[Row]:
    padded = values + values[: (-len(values)) % k]
    return [padded[start : start + k] for start in range(0, len(padded), k)]


def cases() -> Iterator[Case]:
    """Every fixture case, in a fixed order."""
    rng = random.Random(SEED)
    sides, forms = ("input", "output"), (False, True)
    for side in sides:
        for b64 in forms:
            tag = f"{side}/{'b64' if b64 else 'json'}"
            for k in (1, 5, 20):
                for num in sorted({0, 1, 5, 20, k}):
                    for _ in range(4):
                        val = _rows(rng, _prefix(rng, rng.randrange(4)), rng.randrange(1, 7), k)
                        yield _case(
                            f"{tag}/k{k}/num{num}",
                            side,
                            val,
                            _ids_like(rng, val, INT32_IDS),
                            num,
                            b64,
                        )
            for k in (1, 5, 7):
                val = _prefix(rng, rng.randrange(3)) + _chunk(SPECIAL_VALUES, k)
                yield _case(
                    f"{tag}/special-values/k{k}", side, val, _ids_like(rng, val, INT32_IDS), k, b64
                )
            for num in (0, 1, 5, 20):
                yield _case(f"{tag}/empty/num{num}", side, [], [], num, b64)
                for nulls in (1, 3):
                    val = _prefix(rng, nulls)
                    yield _case(
                        f"{tag}/all-null/num{num}",
                        side,
                        val,
                        _ids_like(rng, val, INT32_IDS),
                        num,
                        b64,
                    )
            val = [[], [], [-0.5, -1.5]]
            yield _case(
                f"{tag}/empty-rows-prefix", side, val, _ids_like(rng, val, INT32_IDS), 2, b64
            )
            val = _rows(rng, [], 24, 20)
            yield _case(f"{tag}/large/k20", side, val, _ids_like(rng, val, INT32_IDS), 20, b64)
            yield from _error_cases(rng, tag, side, b64)
        val = _rows(rng, [None], 4, 3)
        yield _case(f"{side}/json/wide-ids", side, val, _ids_like(rng, val, WIDE_IDS), 3, False)


def _error_cases(rng: random.Random, tag: str, side: str, b64: bool) -> Iterator[Case]:
    """Rows SGLang cannot flatten: a null, empty or wrong-length row after a covered one."""
    for k in (1, 5, 20):
        bad_rows: list[Row] = [None, [], [-1.0] * (k + 1)] + ([[-1.0] * (k - 1)] if k > 1 else [])
        for bad_row in bad_rows:
            body = _rows(rng, [], rng.randrange(1, 5), k)
            body.insert(rng.randrange(1, len(body) + 1), bad_row)
            val = _prefix(rng, rng.randrange(3)) + body
            yield _case(f"{tag}/error/k{k}", side, val, _ids_like(rng, val, INT32_IDS), k, b64)


def run_oracle(python: str, script: str, batch: list[Case]) -> list[dict[str, object]]:
    """SGLang's fields (or its ValueError) for each case, in order."""
    version = subprocess.run(
        [python, "-c", "import importlib.metadata as m; print(m.version('sglang'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if version != SGLANG_VERSION:
        raise SystemExit(f"the oracle has SGLang {version}, expected {SGLANG_VERSION}")
    lines = "".join(json.dumps(case) + "\n" for case in batch)
    done = subprocess.run(
        [python, script], input=lines, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"the oracle failed:\n{done.stderr}")
    answers: list[dict[str, object]] = [json.loads(line) for line in done.stdout.splitlines()]
    if len(answers) != len(batch):
        raise SystemExit(f"the oracle answered {len(answers)} of {len(batch)} cases")
    return answers


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--oracle-python",
        default=os.environ.get("SGLANG_ORACLE_PYTHON", "/tmp/sglang-oracle/bin/python"),
    )
    parser.add_argument(
        "--oracle-script",
        default=os.environ.get(
            "SGLANG_ORACLE_FLAT_SCRIPT", str(Path(__file__).parent / "oracle" / "flat_fields.py")
        ),
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    batch = list(cases())
    answers = run_oracle(args.oracle_python, args.oracle_script, batch)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8") as out:
        for case, expected in zip(batch, answers, strict=True):
            out.write(json.dumps({**case, "expected": expected}) + "\n")
    errors = sum("error" in answer for answer in answers)
    print(f"wrote {len(batch)} cases ({errors} errors) to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
