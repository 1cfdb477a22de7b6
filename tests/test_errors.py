"""The library's exceptions: pickling, their codes, and how they are answered as SGLang answers."""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, get_args

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

import sglang_envelope
from sglang_envelope import (
    EngineError,
    EnvelopeError,
    LimitExceeded,
    RequestRejected,
    ResponseError,
    UpstreamError,
    aggregate_sse,
    decode_client_request,
    error_response,
    parse_unary,
)
from sglang_envelope.errors.answers import FIELD_LAYERS, REFUSAL_LAYERS
from sglang_envelope.request.deployment import DEPLOYMENT_RULES
from sglang_envelope.request.rules import RULES
from sglang_envelope.stream import SSE_DONE, error_event
from sglang_envelope.types import RejectionCode
from tests.strategies import error_statuses, error_texts

FIXTURE = Path(__file__).parent / "fixtures" / "error_shapes.jsonl"
CASES = [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines()]
WRITTEN = [case for case in CASES if case["kind"] == "written"]
READ = [case for case in CASES if case["kind"] == "read"]

#: One instance of every exception class the library exports, with every field set.
EXAMPLES: list[EnvelopeError] = [
    EnvelopeError("role 'decode' needs a Bootstrap (host, port, room)"),
    RequestRejected("orchestrator_field", "routed_dp_rank", "routed_dp_rank is set only by ..."),
    RequestRejected("body_too_large", None, "request body is 9 bytes; the limit is 1"),
    ResponseError("frame 2: output_ids: expected an array, got a string"),
    LimitExceeded("max_bytes", 1024),
    LimitExceeded("max_positions", 16, "input_top_logprobs_null_prefix (99) exceed 16"),
    EngineError("The server is overloaded.", 503),
    EngineError("", None),
    UpstreamError("SGLang could not be reached: ConnectError", 502),
    UpstreamError("SGLang did not answer in time", 504),
    UpstreamError("no connection to SGLang came free in time", 503, retry_after_s=1),
]


def facts(exc: BaseException) -> tuple[Any, ...]:
    return type(exc), str(exc), exc.args, vars(exc)


def test_every_exported_exception_has_an_example() -> None:
    exported = {
        value
        for name in sglang_envelope.__all__
        if isinstance(value := getattr(sglang_envelope, name), type)
        and issubclass(value, BaseException)
    }
    assert exported == {type(exc) for exc in EXAMPLES}


@pytest.mark.parametrize("exc", EXAMPLES, ids=repr)
def test_exceptions_round_trip_through_pickle(exc: EnvelopeError) -> None:
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        copy = pickle.loads(pickle.dumps(exc, protocol))
        assert facts(copy) == facts(exc)
        assert repr(copy) == repr(exc)


def _raise(index: int) -> None:
    raise EXAMPLES[index]


def _reject(body: bytes) -> None:
    decode_client_request(body)


def test_exceptions_raised_in_a_process_pool_arrive_as_themselves() -> None:
    with ProcessPoolExecutor(max_workers=1) as pool:
        for index, exc in enumerate(EXAMPLES):
            with pytest.raises(type(exc)) as raised:
                pool.submit(_raise, index).result(timeout=60)
            assert facts(raised.value) == facts(exc)
        with pytest.raises(RequestRejected) as rejected:
            pool.submit(_reject, b'{"input_ids": [1], "routed_dp_rank": 0}').result(timeout=60)
    assert (rejected.value.code, rejected.value.field) == ("orchestrator_field", "routed_dp_rank")


def test_the_rejection_codes_are_the_rules_codes() -> None:
    """`RejectionCode` lists exactly the codes of `RULES`, in order: a rule added or
    renamed without the type (or the other way round) fails here."""
    codes = [rule.code for rule in RULES]
    codes += [rule.code for rule in DEPLOYMENT_RULES if rule.code not in codes]
    assert list(get_args(RejectionCode)) == codes


# --- reading SGLang's error objects -------------------------------------------


@pytest.mark.parametrize("case", READ, ids=lambda case: json.dumps(case["error"]))
def test_error_objects_read_as_sglang_reads_them(case: dict[str, Any]) -> None:
    """An error object SGLang's own `ErrorBody` accepts is an `EngineError` with its
    message ("" when absent); a message SGLang refuses is a `ResponseError`. A code
    SGLang leaves out reads as None here (SGLang's default is 0)."""
    error, verdict = case["error"], case["verdict"]
    frame = b"data: " + msgspec.json.encode({"error": error}) + b"\n\n" + SSE_DONE
    body = msgspec.json.encode({"error": error})
    readers: list[Callable[[], object]] = [
        lambda: aggregate_sse([frame]),
        lambda: parse_unary(body),
    ]
    for read in readers:
        if "refused" in verdict and "message" in error:
            with pytest.raises(ResponseError, match=r"error\.message: expected a string") as raised:
                read()
            assert not isinstance(raised.value, EngineError)
            continue
        if "refused" in verdict:  # a code SGLang's u32 refuses; any integer or null is kept
            code = error["code"]
            if type(code) is not int and code is not None:
                with pytest.raises(ResponseError, match=r"error\.code: expected an integer"):
                    read()
                continue
            verdict = {"message": error.get("message", ""), "code": code}
        with pytest.raises(EngineError) as raised:
            read()
        assert raised.value.message == verdict["message"]
        assert raised.value.code == error.get("code")


# --- writing errors as SGLang does --------------------------------------------


@pytest.mark.parametrize("case", WRITTEN, ids=lambda c: f"{c['status_code']}-{c['message'][:9]}")
def test_an_engine_error_is_written_as_sglang_writes_it(case: dict[str, Any]) -> None:
    """SGLang's own handlers, driven with the same message and status: byte-equal answers."""
    status = case["status_code"] if case["status_code"] is not None else 400
    exc = EngineError(case["message"], status)
    assert error_event(exc) + SSE_DONE == case["sse"].encode()
    assert error_response(exc, stream=True) == (
        200, "text/event-stream; charset=utf-8", case["sse"].encode()
    )  # fmt: skip
    for unary in (None, False):
        assert error_response(exc, stream=unary) == (
            case["unary_status"], "application/json", case["unary_body"].encode()
        )  # fmt: skip


@pytest.mark.parametrize(
    ("exc", "status", "error"),
    [
        (
            RequestRejected("orchestrator_field", "routed_dp_rank", "no"),
            400,
            {"type": "orchestrator_field", "param": "routed_dp_rank"},
        ),
        (
            RequestRejected("body_too_large", None, "too big"),
            413,
            {"type": "body_too_large", "param": None},
        ),
        (EngineError("busy", 503), 503, {"type": "invalid_request_error"}),
        (EngineError("no status", None), 500, {"type": "invalid_request_error"}),
        (EngineError("not an error status", 200), 500, {"type": "invalid_request_error"}),
        (EngineError("out of range", 99999), 500, {"type": "invalid_request_error"}),
        (LimitExceeded("max_bytes", 8), 502, {"type": "limit_exceeded"}),
        (ResponseError("truncated"), 502, {"type": "response_error"}),
        (EnvelopeError("a caller's mistake"), 500, {"type": "envelope_error"}),
    ],
)
def test_the_status_table(exc: EnvelopeError, status: int, error: dict[str, Any]) -> None:
    got = error_response(exc, detail=True)
    expected = {"message": str(exc), **error, "code": status, "retryable": False}
    assert (got.status, got.content_type) == (status, "application/json")
    assert msgspec.json.decode(got.body) == {"error": expected}
    assert error_event(exc, detail=True) == b"data: " + got.body + b"\n\n"
    plain = error_response(exc, stream=False)
    assert plain.status == status and plain.content_type == "application/json"
    assert msgspec.json.decode(plain.body) == {"error": {"message": str(exc)}}
    streamed = error_response(exc, stream=True)
    if isinstance(exc, RequestRejected) and status != 400:  # body_too_large
        assert streamed == plain
    else:
        assert streamed == (200, "text/event-stream; charset=utf-8", error_event(exc) + SSE_DONE)


class MyRejection(RequestRejected):
    pass


def test_a_subclass_is_answered_as_its_base() -> None:
    answer = error_response(MyRejection("body_too_large", None, "x"), detail=True)
    assert answer.status == 413
    assert msgspec.json.decode(answer.body)["error"]["type"] == "body_too_large"


@pytest.mark.parametrize("exc", EXAMPLES, ids=repr)
def test_a_relayed_error_reads_back_as_an_engine_error(exc: EnvelopeError) -> None:
    """A worker's answer read by the frontend: the message and status survive, in both modes."""
    status, _, body = error_response(exc)
    with pytest.raises(EngineError) as raised:
        parse_unary(body, status=status)
    assert (raised.value.message, raised.value.code) == (str(exc), status)
    status, content_type, stream = error_response(exc, stream=True)
    with pytest.raises(EngineError) as streamed:
        if content_type.startswith("text/event-stream"):
            aggregate_sse([stream])
        else:  # body_too_large: 413 in both modes
            parse_unary(stream, status=status)
    assert (streamed.value.message, streamed.value.code) == (str(exc), error_response(exc).status)


def test_hand_built_fields_of_any_type_still_give_json() -> None:
    weird: list[EnvelopeError] = [
        RequestRejected(["body_too_large"], {"a": 1}, "m"),  # type: ignore[arg-type]
        EngineError(b"bytes", [500]),  # type: ignore[arg-type]
        LimitExceeded(None, None),  # type: ignore[arg-type]
    ]
    for exc in weird:
        for detail in (False, True):
            status, _, body = error_response(exc, detail=detail)
            assert "message" in msgspec.json.decode(body)["error"]
        assert msgspec.json.decode(error_response(exc, detail=True).body)["error"]["code"] == status
    assert [error_response(exc).status for exc in weird] == [400, 500, 502]


@pytest.mark.parametrize("exc", [ValueError("x"), None, "error", KeyError("k")])
def test_only_library_exceptions_are_answered(exc: Any) -> None:
    for write in (error_response, error_event):
        with pytest.raises(EnvelopeError, match="exc must be an EnvelopeError, got"):
            write(exc)


@given(error_texts, error_texts, st.none() | error_texts, error_statuses)
def test_any_fields_give_json(message: str, code: str, field: str | None, status: Any) -> None:
    """Hand-built exceptions with any text (lone surrogates included) still give JSON."""
    for exc in (RequestRejected(code, field, message), EngineError(message, status)):
        for stream in (None, False, True):
            got_status, _, body = error_response(exc, stream=stream)
            assert 200 <= got_status < 600
            assert body.startswith(b"data: {" if got_status == 200 else b"{")
        got_status, _, body = error_response(exc, detail=True)
        assert 400 <= got_status < 600
        assert msgspec.json.decode(body)["error"]["code"] == got_status
        assert error_event(exc).startswith(b"data: {")


def _table(name: str) -> list[list[str]]:
    page = (Path(__file__).parent.parent / "docs" / "errors.md").read_text(encoding="utf-8")
    table = page.split(f"<!-- {name}:start -->")[1].split(f"<!-- {name}:end -->")[0]
    lines = table.strip().splitlines()[2:]
    return [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in lines]


def test_the_documented_table_is_the_code_s() -> None:
    rows = {name.strip("`"): (status, kind) for name, status, kind, _ in _table("error-statuses")}
    classes = [RequestRejected, EngineError, LimitExceeded, UpstreamError, ResponseError]
    assert list(rows) == [cls.__name__ for cls in [*classes, EnvelopeError]]
    for cls in (LimitExceeded, ResponseError, EnvelopeError):  # a status of the class's own
        assert rows[cls.__name__] == (str(cls.status), f"`{cls.error_type}`")
    assert rows["RequestRejected"] == (
        "400; 413 for `body_too_large`",
        "`invalid_request_error`; its `code` with `detail=True`",
    )
    assert rows["EngineError"] == (
        "its `code` when in [400, 600), else 500",
        f"`{EngineError.error_type}`",
    )
    for exc in EXAMPLES:
        status, kind = rows[type(exc).__name__]
        got_status, _, body = error_response(exc, detail=True)
        got_kind = msgspec.json.decode(body)["error"]["type"]
        frame_kind = msgspec.json.decode(error_event(exc)[6:])["error"]["type"]
        if isinstance(exc, RequestRejected):
            assert got_kind == exc.code and frame_kind == "invalid_request_error"
            assert got_status == (413 if exc.code == "body_too_large" else 400)
        elif isinstance(exc, EngineError):
            assert f"`{got_kind}`" == kind == f"`{frame_kind}`"
        elif isinstance(exc, UpstreamError):
            assert (got_status, f"`{got_kind}`") == (exc.status, kind)
            assert error_response(exc, stream=True).status == exc.status
        else:
            assert (str(got_status), f"`{got_kind}`") == (status, kind)


def test_the_documented_layers_are_the_code_s() -> None:
    rows = _table("refusal-layers")
    documented = {name.replace("`", ""): layer.replace("`", "") for name, layer, _ in rows}
    listed: dict[str, str] = dict(REFUSAL_LAYERS)
    listed |= {
        f"wrong_type, invalid_value at {field}": layer for field, layer in FIELD_LAYERS.items()
    }
    listed["every other rule"] = "engine"
    assert documented == listed


@pytest.mark.parametrize("exc", EXAMPLES, ids=lambda exc: type(exc).__name__)
def test_an_exception_carries_what_its_answer_is_made_of(exc: EnvelopeError) -> None:
    """A caller that runs SGLang in-process reads the answer's fields off the exception."""
    status, _, body = error_response(exc, detail=True)
    error = msgspec.json.decode(body)["error"]
    frame = msgspec.json.decode(error_event(exc)[6:])["error"]
    assert (exc.status, exc.message, exc.retryable) == (status, error["message"], False)
    assert (frame["type"], frame["code"], frame["retryable"]) == (
        exc.error_type,
        exc.status,
        exc.retryable,
    )
    assert error_response(exc).status == exc.status  # a unary client's answer
    assert exc.message == str(exc)
