"""Write tests/fixtures/sse_responses.jsonl: SGLang's own /generate bytes and answers.

Run with the SGLang oracle environment's interpreter (built by
scripts/oracle/setup.sh); it imports SGLang 0.5.23:

    /tmp/sglang-oracle/bin/python scripts/make_sse_fixtures.py [--out PATH]

Every case drives SGLang's own code with a stub tokenizer manager that yields
deterministic frames:

* the bytes come from ``http_server.serve_generate_request`` (executed from
  its source, see `load_http_handlers`): the SSE stream
  of ``stream_results`` (its framing, its error frame, its ``[DONE]``) or the
  non-streaming body (``orjson_response`` / ``_create_error_response``);
* incremental frames are cut from cumulative ones by
  ``tokenizer_manager._slice_streaming_output_meta_info``;
* the expected answer of an incremental stream is SGLang's own
  ``TokenizerManager._coalesce_streaming_chunks`` over all its frames, that of
  a cumulative stream its last frame; an abort is then put through
  ``TokenizerManager._handle_abort_finish_reason`` as the non-streaming path
  does, and a raise becomes the expected error.

One JSON line per case:

    {"name": ..., "kind": "sse" | "unary", "incremental": bool,
     "body": <the bytes, as text>,
     "expected": <the response> | {"error": {"message": ..., "code": ...}}}
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import copy
import json
import logging
import random
import types
from collections.abc import AsyncIterator, Iterator
from collections.abc import AsyncIterator as _AsyncIterator
from http import HTTPStatus
from pathlib import Path
from typing import Any

import sglang
from fastapi.responses import ORJSONResponse  # type: ignore[import-not-found]
from sglang.srt.environ import envs
from sglang.srt.managers.tokenizer_manager import (
    TokenizerManager,
    _slice_streaming_output_meta_info,
)
from sglang.srt.utils.json_response import dumps_json, orjson_response
from starlette.responses import StreamingResponse

SEED = 20260523
ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "tests" / "fixtures" / "sse_responses.jsonl"
WORDS = [
    " the",
    " cat",
    " sat",
    " on",
    " a",
    " mat",
    " \u00e9t\u00e9",
    " \u732b",
    " \U0001f431",
    "\n",
    ' "q"',
]


HANDLERS = ("serve_generate_request", "_create_error_response")


def load_http_handlers(tokenizer_manager: Any) -> dict[str, Any]:
    """SGLang's /generate handlers, run from http_server.py's own source.

    Importing the module starts SGLang's whole server stack (and needs
    packages the oracle environment leaves out), so the two functions are
    executed on their own, with the names they use.
    """
    path = Path(sglang.__file__).parent / "srt" / "entrypoints" / "http_server.py"
    tree = ast.parse(path.read_text())
    wanted = [node for node in tree.body if getattr(node, "name", None) in HANDLERS]
    assert len(wanted) == len(HANDLERS), "http_server.py no longer has the handlers"
    namespace: dict[str, Any] = {
        "_global_state": types.SimpleNamespace(tokenizer_manager=tokenizer_manager),
        "envs": envs,
        "apply_header_overrides": None,  # unused: SGLANG_ENABLE_REQUEST_HEADER_OVERRIDES is off
        "AsyncIterator": _AsyncIterator,
        "GenerateReqInput": Any,
        "Request": Any,
        "HTTPStatus": HTTPStatus,
        "ORJSONResponse": ORJSONResponse,
        "StreamingResponse": StreamingResponse,
        "dumps_json": dumps_json,
        "orjson_response": orjson_response,
        "logger": logging.getLogger("sglang.http_server"),
    }
    exec(compile(ast.Module(body=wanted, type_ignores=[]), str(path), "exec"), namespace)
    return namespace


class StubTokenizerManager:
    """Yields prepared frames, or raises after them, as `generate_request` does."""

    def __init__(self, frames: list[dict[str, Any]], error: Exception | None) -> None:
        self.frames = frames
        self.error = error

    async def generate_request(self, obj: Any, request: Any) -> AsyncIterator[dict[str, Any]]:
        for frame in self.frames:
            yield copy.deepcopy(frame)
        if self.error is not None:
            raise self.error

    def create_abort_task(self, obj: Any) -> None:
        return None


class StubRequest:
    async def is_disconnected(self) -> bool:
        return False


async def serve(frames: list[dict[str, Any]], *, stream: bool, error: Exception | None) -> bytes:
    """The bytes SGLang's /generate handler sends for these frames."""
    handlers = load_http_handlers(StubTokenizerManager(frames, error))
    obj = types.SimpleNamespace(stream=stream)
    response = await handlers["serve_generate_request"](obj, StubRequest())
    if not stream:
        return bytes(response.body)
    return b"".join([part async for part in response.body_iterator])


def generation(
    rng: random.Random,
    steps: int,
    *,
    logprobs: bool,
    extra: bool,
    text: bool,
    finish: dict[str, Any],
) -> Iterator[dict[str, Any]]:
    """Cumulative frames, one per decode step of one to three tokens, built as
    `TokenizerManager._handle_batch_output` builds them."""
    ids: list[int] = []
    pieces: list[str] = []
    token_lps: list[list[Any]] = []
    top_lps: list[Any] = []
    ids_lps: list[Any] = []
    mask: list[Any] = []
    mask_lps: list[Any] = []
    for step in range(steps):
        for _ in range(rng.randint(1, 3)):
            token = rng.randrange(150_000)
            ids.append(token)
            pieces.append(rng.choice(WORDS))
            token_lps.append([round(-rng.random() * 9, 6), token, None])
            top_lps.append(
                [[round(-rng.random() * 9, 6), rng.randrange(150_000), None] for _ in range(3)]
            )
            ids_lps.append([[round(-rng.random() * 9, 6), 7, None]])
            mask.append([rng.randrange(2) for _ in range(4)])
            mask_lps.append([round(-rng.random(), 6)])
        last = step == steps - 1
        meta: dict[str, Any] = {
            "id": "rid-0",
            "finish_reason": finish if last else None,
            "prompt_tokens": 5,
            "weight_version": "default",
            "num_retractions": 0,
        }
        if logprobs:
            meta.update(
                input_token_logprobs=[[None, 1, None], [-1.5, 2, None]],
                output_token_logprobs=list(token_lps),
                output_token_logprobs_length=len(token_lps),
                input_top_logprobs=[None, [[-0.5, 3, None]]],
                output_top_logprobs=list(top_lps),
            )
        if extra:
            meta.update(
                input_token_ids_logprobs=[None, [[-2.0, 7, None]]],
                output_token_ids_logprobs=list(ids_lps),
                output_token_sampling_mask=list(mask),
                output_token_sampling_logprobs=list(mask_lps),
                output_token_sampling_mask_length=len(mask),
                unknown_meta_key={"kept": [1, 2]},
            )
        meta.update(reasoning_tokens=0, completion_tokens=len(ids), cached_tokens=0)
        if last:
            meta["e2e_latency"] = 0.25
        frame: dict[str, Any] = {"text": "".join(pieces)} if text else {}
        frame.update(output_ids=list(ids), meta_info=meta)
        yield frame


def incremental(cumulative: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same frames as an incremental_streaming_output server sends them."""
    frames = []
    offset = 0
    text_offset = 0
    for full in cumulative:
        frame = copy.deepcopy(full)
        _slice_streaming_output_meta_info(frame["meta_info"], offset)
        frame["output_ids"] = full["output_ids"][offset:]
        if "text" in full:
            frame["text"] = full["text"][text_offset:]
            text_offset = len(full["text"])
        offset = len(full["output_ids"])
        frames.append(frame)
    return frames


def abort_frame(cumulative: list[dict[str, Any]], reason: dict[str, Any]) -> dict[str, Any]:
    """The frame `TokenizerManager._handle_abort_req` sends to an incremental stream."""
    last = cumulative[-1]
    meta = {
        "id": "rid-0",
        "finish_reason": reason,
        "weight_version": "default",
        "e2e_latency": 0.5,
    }
    # add_logprob_to_meta_info attaches the whole lists, not the unsent part.
    for key in (
        "input_token_logprobs",
        "output_token_logprobs",
        "output_token_logprobs_length",
        "input_top_logprobs",
        "output_top_logprobs",
    ):
        if key in last["meta_info"]:
            meta[key] = last["meta_info"][key]
    meta["completion_tokens"] = len(last["output_ids"])
    return {"text": last["text"], "output_ids": last["output_ids"][-1:], "meta_info": meta}


def expected_answer(frames: list[dict[str, Any]], incremental_mode: bool) -> dict[str, Any]:
    """SGLang's own merge, then its non-streaming abort rule."""
    if incremental_mode:
        out: dict[str, Any] = TokenizerManager._coalesce_streaming_chunks(
            None, copy.deepcopy(frames), "rid-0"
        )
    else:
        out = copy.deepcopy(frames[-1])
    stub = types.SimpleNamespace(rid_to_state={}, _release_lora_once=lambda state: None)
    state = types.SimpleNamespace(obj=types.SimpleNamespace(rid="rid-0"))
    try:
        asyncio.run(TokenizerManager._handle_abort_finish_reason(stub, out, state, False))
    except ValueError as exc:
        return {"error": {"message": str(exc), "code": 400}}
    except Exception as exc:  # fastapi.HTTPException
        return {"error": {"message": exc.detail, "code": exc.status_code}}  # type: ignore[attr-defined]
    return out


def cases(rng: random.Random) -> Iterator[dict[str, Any]]:
    length = {"type": "length", "length": 9}
    stop = {"type": "stop", "matched": 2}
    shapes = [
        ("logprobs", dict(logprobs=True, extra=False, text=True, finish=length)),
        ("every_delta_key", dict(logprobs=True, extra=True, text=True, finish=stop)),
        ("plain", dict(logprobs=False, extra=False, text=True, finish=stop)),
        ("skip_tokenizer_init", dict(logprobs=True, extra=False, text=False, finish=length)),
    ]
    for name, shape in shapes:
        cumulative = list(generation(rng, rng.randint(4, 9), **shape))  # type: ignore[arg-type]
        for mode, frames in (("incremental", incremental(cumulative)), ("cumulative", cumulative)):
            yield sse_case(f"{name}_{mode}", frames, mode == "incremental")
        yield unary_case(f"{name}_unary", cumulative[-1])

    cumulative = list(generation(rng, 4, logprobs=True, extra=False, text=True, finish=length))
    cumulative[-1]["meta_info"]["finish_reason"] = None
    frames = incremental(cumulative)
    error = ValueError("The running request was aborted by a backend error.")
    yield sse_case("error_frame_incremental", frames[:3], True, error=error)
    error.status_code = 503  # type: ignore[attr-defined]
    yield sse_case("error_frame_status_incremental", frames[:2], True, error=error)

    for name, reason in (
        ("abort_queue_incremental", {"type": "abort", "message": "Abort in waiting queue"}),
        (
            "abort_timeout_incremental",
            {"type": "abort", "status_code": 503, "message": "Request running timeout reached."},
        ),
        (
            "abort_bad_request_incremental",
            {"type": "abort", "status_code": 400, "message": "bad input"},
        ),
    ):
        yield sse_case(name, [*frames, abort_frame(cumulative, reason)], True)
    aborted = copy.deepcopy(cumulative[-1])
    aborted["meta_info"]["finish_reason"] = {
        "type": "abort",
        "message": "Aborted",
        "status_code": None,
        "err_type": None,
    }
    yield sse_case("abort_no_status_cumulative", [*cumulative[:-1], aborted], False)

    yield unary_error_case(
        "unary_error", ValueError("Input length exceeds the context length."), None
    )
    yield unary_error_case("unary_error_status", ValueError("The server is overloaded."), 503)


def sse_case(
    name: str, frames: list[dict[str, Any]], incremental_mode: bool, error: Exception | None = None
) -> dict[str, Any]:
    body = asyncio.run(serve(frames, stream=True, error=error))
    if error is not None:
        expected = {"error": {"message": str(error), "code": getattr(error, "status_code", 400)}}
    else:
        expected = expected_answer(frames, incremental_mode)
    return {
        "name": name,
        "kind": "sse",
        "incremental": incremental_mode,
        "body": body.decode(),
        "expected": expected,
    }


def unary_case(name: str, response: dict[str, Any]) -> dict[str, Any]:
    body = asyncio.run(serve([response], stream=False, error=None))
    return {
        "name": name,
        "kind": "unary",
        "incremental": False,
        "body": body.decode(),
        "expected": json.loads(body),
    }


def unary_error_case(name: str, error: Exception, status: int | None) -> dict[str, Any]:
    if status is not None:
        error.status_code = status  # type: ignore[attr-defined]
    body = asyncio.run(serve([], stream=False, error=error))
    return {
        "name": name,
        "kind": "unary",
        "incremental": False,
        "body": body.decode(),
        "expected": {"error": {"message": str(error), "code": None}},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    rng = random.Random(SEED)
    with args.out.open("w") as out:
        for case in cases(rng):
            out.write(json.dumps(case, ensure_ascii=False, sort_keys=True) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
