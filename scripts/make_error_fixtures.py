"""Write tests/fixtures/error_shapes.jsonl: SGLang's own /generate errors, written and read.

Run with the SGLang oracle environment's interpreter (built by
scripts/oracle/setup.sh); it imports SGLang 0.5.23:

    /tmp/sglang-oracle/bin/python scripts/make_error_fixtures.py [--out PATH]

Two kinds of line:

* ``"written"``: a ``ValueError`` (with or without a ``status_code``) raised by
  the tokenizer manager, put through SGLang's own ``/generate`` handler
  (``http_server.serve_generate_request``, run from its source as
  `make_sse_fixtures.load_http_handlers` does): the SSE bytes of a streaming
  request (its error frame and ``[DONE]``), and the status and body of a
  non-streaming one (``_create_error_response``).

      {"kind": "written", "message": ..., "status_code": int | null,
       "sse": <text>, "unary_status": int, "unary_body": <text>}

* ``"read"``: an error object as SGLang's own typed reader of a stream error
  frame reads it (``sglang.api.v1.api_types.GenerateStreamError``, whose
  ``ErrorBody`` has ``message: str = ""`` and ``code: u32 = 0``).

      {"kind": "read", "error": <the object>,
       "verdict": {"message": ..., "code": ...} | {"refused": <SGLang's text>}}
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import types
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_sse_fixtures import (
    StubRequest,
    StubTokenizerManager,
    load_http_handlers,
)
from sglang.api.v1.api_types import (
    GenerateStreamError,
)

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "tests" / "fixtures" / "error_shapes.jsonl"

MESSAGES = [
    "The server is overloaded.",
    "",
    'quote " backslash \\ newline \n tab \t bell \x07',
    "caf\u00e9 \u732b \U0001f431 \u2028",
    "x" * 300,
]
STATUS_CODES = [None, 400, 413, 429, 500, 503]

READ_CASES: list[Any] = [
    {},
    {"code": 500},
    {"message": "m"},
    {"message": "m", "code": 503},
    {"message": "m", "type": "invalid_request_error", "code": 400, "retryable": False},
    {"message": "m", "param": "input_ids", "extra": [1]},
    {"message": None},
    {"message": 3},
    {"code": None},
    {"code": "500"},
    {"code": -1},
]


async def written(message: str, status_code: int | None) -> dict[str, Any]:
    def error() -> ValueError:
        exc = ValueError(message)
        if status_code is not None:
            exc.status_code = status_code  # type: ignore[attr-defined]
        return exc

    stream_handlers = load_http_handlers(StubTokenizerManager([], error()))
    response = await stream_handlers["serve_generate_request"](
        types.SimpleNamespace(stream=True), StubRequest()
    )
    sse = b"".join([part async for part in response.body_iterator])
    unary_handlers = load_http_handlers(StubTokenizerManager([], error()))
    unary = await unary_handlers["serve_generate_request"](
        types.SimpleNamespace(stream=False), StubRequest()
    )
    return {
        "kind": "written",
        "message": message,
        "status_code": status_code,
        "sse": sse.decode(),
        "unary_status": unary.status_code,
        "unary_body": bytes(unary.body).decode(),
    }


def read(error: Any) -> dict[str, Any]:
    try:
        frame = GenerateStreamError.from_json_value({"error": error})
    except Exception as exc:  # SGLang's JsonContractError
        return {"kind": "read", "error": error, "verdict": {"refused": str(exc)}}
    body = frame.error
    verdict = {"message": body.message, "code": body.code}
    return {"kind": "read", "error": error, "verdict": verdict}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    lines = [
        asyncio.run(written(message, status)) for message in MESSAGES for status in STATUS_CODES
    ]
    lines += [read(error) for error in READ_CASES]
    with args.out.open("w", encoding="utf-8") as out:
        for line in lines:
            out.write(json.dumps(line, sort_keys=True) + "\n")
    print(f"wrote {len(lines)} cases to {args.out}")


if __name__ == "__main__":
    main()
