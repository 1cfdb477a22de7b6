"""Hostile input to every entry point raises `EnvelopeError`, never a crash.

The module files test each entry point's own rules; this one holds the
cross-cutting matrix (every entry point x every kind of hostile input in
`HOSTILE_KINDS`), the Hypothesis tests the module files lack, the in-process
command-line fuzz, and the regression tests of the crashes the hardening
audit found. A test fails when anything but an `EnvelopeError` escapes; where
the input can only be refused, it also fails when the input is accepted.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sglang_envelope.cli.commands as _cli_commands
from sglang_envelope import (
    Bootstrap,
    ClientRequest,
    EngineError,
    EngineRequest,
    EnvelopeError,
    LimitExceeded,
    RequestRejected,
    Routing,
    WorkerEnvelope,
    aggregate_sse,
    build_engine_request,
    decode_client_request,
    decode_envelope,
    encode_envelope,
    parse_unary,
    to_worker_envelope,
)
from sglang_envelope.cli.demo import DEMO_SSE_TRANSCRIPT, SEED_REQUEST, demo_unary_body
from sglang_envelope.cli.main import main
from sglang_envelope.flat import (
    DEFAULT_MAX_NESTED_POSITIONS,
    FlatTopLogprobs,
    decode_flat_top_logprobs,
)
from sglang_envelope.limits import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_INPUT_IDS
from sglang_envelope.pair import merge_prefill
from sglang_envelope.routed import decode_routed_experts, encode_routed_experts, join_routed_experts
from sglang_envelope.stream import SseDecoder, StreamAggregator, aggregate_frames
from sglang_envelope.types import RoleName
from tests.strategies import (
    ABSENT,
    DEPLOYMENT,
    HOSTILE_BASES,
    HOSTILE_KINDS,
    HOSTILE_VALUES,
    SGLANG_ANSWERS,
    chunkings,
    client_requests,
    flat_fields,
    flat_sides,
    hostile_cli_inputs,
    hostile_documents,
    hostile_objects,
    hostile_placed,
    hostile_streams,
    hostile_values,
    mutated,
    sse_event,
)


def survive(call: Callable[[], object]) -> object:
    """What `call()` returns, or the `EnvelopeError` it raises; anything else escapes."""
    try:
        return call()
    except EnvelopeError as error:
        assert str(error) or isinstance(error, EngineError)  # SGLang's own text may be empty
        return error


def run_cli(
    argv: list[str], capsys: pytest.CaptureFixture[bytes], *, exits: bool = False
) -> tuple[int, dict[str, Any]]:
    """Run the command line in-process; check it printed one JSON object and no traceback.

    Returns the exit code and the object. `exits`: argparse ends the run with SystemExit.
    """
    if exits:
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        code = exit_info.value.code
    else:
        code = main(argv)
    out, err = capsys.readouterr()
    assert b"Traceback" not in err
    assert code in (0, 1, 2)
    assert out.endswith(b"\n")
    assert out.count(b"\n") == 1
    document = msgspec.json.decode(out)
    assert type(document) is dict
    if code:
        assert list(document) == ["error"]
        error = document["error"]
        assert type(error["type"]) is str
        assert type(error["message"]) is str
        assert error["message"] or error["type"] == "engine_error"  # SGLang's text may be empty
    return code, document


Cli = Callable[[list[str], bytes], tuple[int, dict[str, Any]]]
"""Run the command line on argv with these bytes on stdin."""


def stdin_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[bytes]) -> Cli:
    def run(argv: list[str], data: bytes) -> tuple[int, dict[str, Any]]:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
        return run_cli(argv, capsys)

    return run


# --- the matrix: every entry point x every kind of hostile input ---

#: Kinds whose JSON text or SSE stream no entry point that reads bytes may accept.
ALWAYS_REFUSED = frozenset({"random_bytes", "deep_nesting", "unterminated"})
#: Kinds with no Python form, so the entry points that take Python values skip them.
TEXT_ONLY = frozenset({"unterminated"})

RESPONSE = HOSTILE_BASES["response"][0]
INTERMEDIATE: dict[str, Any] = {"text": "", "meta_info": {"finish_reason": None}}
ENVELOPE = to_worker_envelope(decode_client_request({"input_ids": [1, 2]}), rid="r")


def expect(outcome: object, accepted: type | tuple[type, ...], *, refused: bool) -> None:
    """`outcome` is an `EnvelopeError` or, unless the input must be `refused`, a result."""
    if not isinstance(outcome, EnvelopeError):
        assert not refused, f"accepted: {outcome!r:.200}"
        assert isinstance(outcome, accepted)


def thirds(data: bytes) -> list[bytes]:
    return [
        data[: len(data) // 3],
        data[len(data) // 3 : len(data) * 2 // 3],
        data[len(data) * 2 // 3 :],
    ]


def check_decode_client_request(kind: str, cli: Cli) -> None:
    for document in hostile_documents("request", kind):
        outcome = survive(partial(decode_client_request, document))
        expect(outcome, ClientRequest, refused=kind in ALWAYS_REFUSED)
    for body in hostile_objects("request", kind):
        expect(survive(partial(decode_client_request, body)), ClientRequest, refused=False)


def check_decode_envelope(kind: str, cli: Cli) -> None:
    for document in hostile_documents("envelope", kind):
        outcome = survive(partial(decode_envelope, document))
        expect(outcome, WorkerEnvelope, refused=kind in ALWAYS_REFUSED)


def check_build_engine_request(kind: str, cli: Cli) -> None:
    values = [h.value for h in HOSTILE_VALUES[kind] if h.value is not ABSENT]
    values += [h.text for h in HOSTILE_VALUES[kind]]  # bytes: a Sequence[int] of the wrong kind
    build = partial(build_engine_request, ENVELOPE, deployment=DEPLOYMENT)
    for value in values:
        calls = [
            partial(build, input_ids=value, role="aggregated"),
            partial(build, input_ids=[1, value], role="aggregated"),
            partial(build, input_ids=[1], role=value),
            partial(build, input_ids=[1], role="decode", bootstrap=value),
            partial(
                build_engine_request, value, input_ids=[1], role="aggregated", deployment=DEPLOYMENT
            ),
        ]
        for fields in ((value, 1, 1), ("h", value, 1), ("h", 1, value), ("h", 1, 1, value)):
            calls.append(partial(_build_with_bootstrap, fields))
        # structs built by hand: the value in each place a caller may put one
        for name in ("rid", "stream", "sampling_params", "session_params", "token_ids_logprob"):
            calls.append(partial(_build_from_hand_built, {"input_ids": [1], name: value}))
        calls.append(partial(_build_from_hand_built, {"input_ids": value}))
        calls.append(partial(_build_from_hand_built, {"input_ids": [1]}, rid=value))
        for name in Routing.__struct_fields__:
            calls.append(partial(_build_with_routing, {name: value}))
        for call in calls:
            outcome = survive(call)
            expect(outcome, EngineRequest, refused=False)
            if isinstance(outcome, EngineRequest):
                assert outcome.to_dict()["input_ids"]
        wrapping: list[Callable[[], object]] = [
            partial(to_worker_envelope, value, rid="r"),
            partial(encode_envelope, value),
        ]
        for wrap in wrapping:
            expect(survive(wrap), bytes, refused=True)


def _build_from_hand_built(fields: dict[str, Any], rid: Any = "r") -> EngineRequest:
    envelope = WorkerEnvelope(rid=rid, request=ClientRequest(**fields))
    return build_engine_request(
        envelope,
        deployment=DEPLOYMENT,
        input_ids=envelope.request.input_ids,
        role="prefill",
        bootstrap=Bootstrap("h", 1, 1),
    )


def _build_with_routing(fields: dict[str, Any]) -> EngineRequest:
    routing = Routing(**fields)
    return build_engine_request(
        ENVELOPE,
        deployment=DEPLOYMENT,
        input_ids=[1],
        role="decode",
        bootstrap=Bootstrap("h", 1, 1),
        routing=routing,
    )


def _build_with_bootstrap(fields: tuple[Any, ...]) -> EngineRequest:
    bootstrap = Bootstrap(*fields)  # may refuse the fields itself
    return build_engine_request(
        ENVELOPE, deployment=DEPLOYMENT, input_ids=[1], role="prefill", bootstrap=bootstrap
    )


def _feed_and_close(chunks: list[bytes]) -> list[dict[str, Any]]:
    decoder = SseDecoder()
    frames = [frame for chunk in chunks for frame in decoder.feed(chunk)]
    decoder.close()
    return frames


def check_sse_decoder_feed(kind: str, cli: Cli) -> None:
    for stream in hostile_streams(kind):
        for chunks in ([stream], thirds(stream)):
            outcome = survive(partial(_feed_and_close, chunks))
            expect(outcome, list, refused=False)
            if kind in ALWAYS_REFUSED and isinstance(outcome, list):
                assert outcome in ([], [RESPONSE]), "a hostile event became a frame"


def check_aggregate_sse(kind: str, cli: Cli) -> None:
    for stream in hostile_streams(kind):
        for chunks in ([stream], thirds(stream)):
            for incremental in (True, False):
                outcome = survive(partial(aggregate_sse, chunks, incremental=incremental))
                expect(outcome, dict, refused=kind in ALWAYS_REFUSED)


def check_parse_unary(kind: str, cli: Cli) -> None:
    for document in hostile_documents("response", kind):
        outcome = survive(partial(parse_unary, document))
        expect(outcome, dict, refused=kind in ALWAYS_REFUSED)


def check_aggregate_frames(kind: str, cli: Cli) -> None:
    for frame in hostile_objects("response", kind):
        for frames in ([frame], [INTERMEDIATE, frame], [frame, RESPONSE]):
            for incremental in (True, False):
                outcome = survive(partial(aggregate_frames, frames, incremental=incremental))
                expect(outcome, dict, refused=False)


def check_decode_flat_top_logprobs(kind: str, cli: Cli) -> None:
    for meta_info in hostile_objects("flat", kind) + hostile_objects("flat_b64", kind):
        for side in ("output", "input"):
            outcome = survive(partial(decode_flat_top_logprobs, meta_info, side=side))
            expect(outcome, (FlatTopLogprobs, type(None)), refused=False)
            if isinstance(outcome, FlatTopLogprobs):
                rows, _ = outcome.shape
                assert len(outcome.to_nested()) == outcome.null_prefix + rows


def check_merge_prefill(kind: str, cli: Cli) -> None:
    for response in hostile_objects("response", kind):
        for prefill, decode in ((response, RESPONSE), (RESPONSE, response), (response, response)):
            outcome = survive(partial(merge_prefill, prefill, decode))
            expect(outcome, dict, refused=False)
            if isinstance(outcome, dict):
                assert type(outcome["meta_info"]) is dict


def check_routed_experts(kind: str, cli: Cli) -> None:
    prompt = {"prompt_tokens": 1, "routed_experts": "AAAAAAAAAAAAAAAAAAAAAA=="}
    for hostile in HOSTILE_VALUES[kind]:
        value = hostile.value
        outcome = survive(partial(decode_routed_experts, value, layers=2, top_k=2))
        expect(outcome, list, refused=type(value) is not str)
        expect(survive(partial(join_routed_experts, [value])), str, refused=type(value) is not str)
        expect(survive(partial(encode_routed_experts, [[[value]]])), str, refused=False)
        legs = {**RESPONSE, "meta_info": {**prompt, "routed_experts": value}}
        plain = {**RESPONSE, "meta_info": prompt}
        for prefill, decode in ((legs, plain), (plain, legs), (legs, legs)):
            outcome = survive(partial(merge_prefill, prefill, decode, routed_experts_shape=(1, 1)))
            expect(outcome, dict, refused=False)


def check_cli_normalize(kind: str, cli: Cli) -> None:
    for document in hostile_documents("request", kind):
        code, _ = cli(["normalize", "--vocab-size", "none", "--role", "aggregated"], document)
        assert code == 2 or kind not in ALWAYS_REFUSED


def check_cli_aggregate(kind: str, cli: Cli) -> None:
    documents, streams = hostile_documents("response", kind), hostile_streams(kind)
    # Each document as a unary body and as the only frame of a stream (the
    # library checks cover its other places in a stream), then the streams as a whole.
    every = 3 * len(documents)
    for data in documents + streams[:every:3] + streams[every:]:
        code, _ = cli(["aggregate"], data)
        assert code == 2 or kind not in ALWAYS_REFUSED


def check_cli_flat(kind: str, cli: Cli) -> None:
    for document in hostile_documents("flat", kind) + hostile_documents("flat_b64", kind):
        code, out = cli(["flat"], document)
        assert code == 2 or kind not in ALWAYS_REFUSED
        assert code in (0, 2)  # the engine's errors have no place here
        if code == 0:
            assert list(out) == ["output_top_logprobs"]


ENTRY_POINTS: dict[str, tuple[Callable[[str, Cli], None], bool]] = {
    # name: (check, takes Python values only)
    "decode_client_request": (check_decode_client_request, False),
    "decode_envelope": (check_decode_envelope, False),
    "build_engine_request": (check_build_engine_request, True),
    "SseDecoder.feed": (check_sse_decoder_feed, False),
    "aggregate_frames": (check_aggregate_frames, True),
    "aggregate_sse": (check_aggregate_sse, False),
    "parse_unary": (check_parse_unary, False),
    "decode_flat_top_logprobs": (check_decode_flat_top_logprobs, True),
    "merge_prefill": (check_merge_prefill, True),
    "routed experts": (check_routed_experts, True),
    "cli normalize": (check_cli_normalize, False),
    "cli aggregate": (check_cli_aggregate, False),
    "cli flat": (check_cli_flat, False),
}

MATRIX = [
    pytest.param(entry, kind, id=f"{entry}-{kind}")
    for entry, (_, python_only) in ENTRY_POINTS.items()
    for kind in HOSTILE_KINDS
    if not (python_only and kind in TEXT_ONLY)
]


@pytest.mark.parametrize(("entry", "kind"), MATRIX)
def test_hostile_input(
    entry: str,
    kind: str,
    monkeypatch: pytest.MonkeyPatch,
    capsysbinary: pytest.CaptureFixture[bytes],
) -> None:
    check, _ = ENTRY_POINTS[entry]
    check(kind, stdin_cli(monkeypatch, capsysbinary))


@pytest.mark.parametrize("shape", sorted(HOSTILE_BASES))
def test_the_hostile_bases_are_valid(shape: str) -> None:
    """Each base document is accepted as it stands, so its hostile variants test the damage."""
    base = HOSTILE_BASES[shape][0]
    encoded = msgspec.json.encode(base)
    if shape == "request":
        assert decode_client_request(encoded).input_ids == (1, 2)
    elif shape == "envelope":
        assert decode_envelope(encoded).rid == "r"
    elif shape == "response":
        assert parse_unary(encoded) == base
        assert aggregate_sse([sse_event(encoded)]) == base
    else:
        flat = decode_flat_top_logprobs(base, side="output")
        assert flat is not None
        assert [entry[1] for entry in flat.to_nested()[-1] or []] == [7, 9]


# --- free-form JSON: any depth, anywhere it may go ---

FREE_FORM_PLACES = (
    b'{"input_ids": [1], "sampling_params": {"custom_params": %s}}',
    b'{"input_ids": [1], "session_params": {"a": %s}}',
    b'{"input_ids": [1], "watermark": {"a": %s}}',
    b'{"input_ids": [1], "sampling_params": {"logit_bias": {"1": %s}}}',
    b'{"input_ids": [1], "sampling_params": {"stop": [%s]}}',
)


@pytest.mark.parametrize("depth", [33, 100, 990, 5_000, 100_000])
@pytest.mark.parametrize("place", FREE_FORM_PLACES, ids=range(len(FREE_FORM_PLACES)))
def test_free_form_nesting_at_any_depth_is_refused(
    depth: int,
    place: bytes,
    monkeypatch: pytest.MonkeyPatch,
    capsysbinary: pytest.CaptureFixture[bytes],
) -> None:
    for nested in (b"[" * depth + b"]" * depth, b'{"k":' * depth + b"1" + b"}" * depth):
        body = place % nested
        for call in (
            partial(decode_client_request, body),
            partial(decode_envelope, b'{"rid": "r", "request": ' + body + b"}"),
        ):
            expect(survive(call), object, refused=True)
        code, _ = stdin_cli(monkeypatch, capsysbinary)(
            ["normalize", "--vocab-size", "none", "--role", "aggregated"], body
        )
        assert code == 2


# --- sizes are bounded before the work is done ---


def test_request_bounds_at_their_defaults() -> None:
    ids = b"[" + b"1," * (DEFAULT_MAX_INPUT_IDS - 1) + b"1]"
    assert len(decode_client_request(b'{"input_ids": ' + ids + b"}").input_ids or ()) == (
        DEFAULT_MAX_INPUT_IDS
    )
    with pytest.raises(RequestRejected) as caught:
        decode_client_request(b'{"input_ids": ' + ids[:-1] + b",1]}")
    assert caught.value.code == "too_many_input_ids"
    assert str(DEFAULT_MAX_INPUT_IDS) in caught.value.message
    with pytest.raises(RequestRejected) as caught:
        decode_envelope(b'{"rid": "r", "request": {"input_ids": ' + ids[:-1] + b",1]}}")
    assert caught.value.code == "too_many_input_ids"
    too_big = b"{" * (DEFAULT_MAX_BODY_BYTES + 1)  # not JSON, but never parsed
    for decode in (decode_client_request, decode_envelope):
        with pytest.raises(RequestRejected) as caught:
            decode(too_big)
        assert caught.value.code == "body_too_large"


def test_cli_bounds(
    monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    cli = stdin_cli(monkeypatch, capsysbinary)
    code, out = cli(
        ["normalize", "--vocab-size", "none", "--role", "aggregated"],
        b" " * (DEFAULT_MAX_BODY_BYTES + 1),
    )
    assert (code, out["error"]["code"]) == (2, "body_too_large")
    monkeypatch.setattr(_cli_commands, "FLAT_MAX_BYTES", 100)
    code, out = cli(["flat"], b"[" * 101)  # not JSON, but never parsed
    assert (code, out["error"]["type"], out["error"]["limit"]) == (2, "limit_exceeded", 100)
    for stream in (DEMO_SSE_TRANSCRIPT, demo_unary_body()):
        code, out = cli(["aggregate", "--max-bytes", str(len(stream) - 1)], stream)
        assert (code, out["error"]["type"]) == (2, "limit_exceeded")
        code, out = cli(["aggregate", "--max-bytes", str(len(stream))], stream)
        assert code == 0


# --- Hypothesis: damaged valid input, and hostile Python values anywhere ---
# The module files hold random bytes, any JSON value and retyped fields; these
# add byte-level damage to valid input and Python values JSON cannot produce.

ROLES_AND_BOOTSTRAPS: list[tuple[RoleName, Bootstrap | None]] = [
    ("aggregated", None),
    ("decode", Bootstrap("h", 1, 1)),
]
RESPONSE_DOCUMENTS = [
    document
    for kind in HOSTILE_KINDS
    if kind != "huge_array"
    for document in hostile_documents("response", kind)
]


def _decode_and_build(body: Any) -> None:
    request = survive(partial(decode_client_request, body))
    if isinstance(request, EnvelopeError):
        return
    assert isinstance(request, ClientRequest)
    envelope = to_worker_envelope(request, rid="r")
    for role, bootstrap in ROLES_AND_BOOTSTRAPS:
        engine = build_engine_request(
            envelope,
            deployment=DEPLOYMENT,
            input_ids=request.input_ids,
            role=role,
            bootstrap=bootstrap,
        )
        assert msgspec.json.decode(engine.to_json()) == engine.to_dict()


@given(
    st.one_of(st.just(SEED_REQUEST), client_requests().map(msgspec.json.encode)).flatmap(mutated)
)
def test_damaged_requests_and_envelopes(body: bytes) -> None:
    _decode_and_build(body)
    outcome = survive(partial(decode_envelope, b'{"rid": "r", "request": ' + body + b"}"))
    expect(outcome, WorkerEnvelope, refused=False)


@given(client_requests().flatmap(hostile_placed))
def test_request_mappings_with_hostile_values(body: Any) -> None:
    _decode_and_build(body)


@given(hostile_values, hostile_values, st.sampled_from(["input_ids", "role", "bootstrap"]))
def test_build_engine_request_with_hostile_values(value: Any, other: Any, where: str) -> None:
    arguments: dict[str, Any] = {"input_ids": [1, 2], "role": "decode", "bootstrap": None}
    arguments[where] = value
    if where != "bootstrap":
        arguments["bootstrap"] = survive(partial(Bootstrap, "h", other, 1))
    outcome = survive(partial(build_engine_request, ENVELOPE, deployment=DEPLOYMENT, **arguments))
    expect(outcome, EngineRequest, refused=False)


SSE_ANSWERS = [answer for answer in SGLANG_ANSWERS if answer["kind"] == "sse"]
UNARY_BODIES = [answer["body"].encode() for answer in SGLANG_ANSWERS if answer["kind"] == "unary"]
SSE_FRAMES = [SseDecoder().feed(answer["body"].encode()) for answer in SSE_ANSWERS]
RESPONSES = [RESPONSE, *(msgspec.json.decode(body) for body in UNARY_BODIES)]


@given(st.lists(st.sampled_from(RESPONSE_DOCUMENTS + UNARY_BODIES), max_size=4), st.data())
def test_hostile_events_in_any_chunks(documents: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(map(sse_event, documents))
    chunks = data.draw(chunkings(stream))
    expect(survive(partial(_feed_and_close, chunks)), list, refused=False)
    for incremental in (True, False):
        outcome = survive(partial(aggregate_sse, chunks, incremental=incremental))
        expect(outcome, dict, refused=False)


@given(st.sampled_from(SGLANG_ANSWERS), st.data())
def test_damaged_sglang_answers(answer: dict[str, Any], data: st.DataObject) -> None:
    body = data.draw(mutated(answer["body"].encode()))
    if answer["kind"] == "unary":
        expect(survive(partial(parse_unary, body)), dict, refused=False)
        return
    chunks = data.draw(chunkings(body))
    expect(survive(partial(_feed_and_close, chunks)), list, refused=False)
    aggregate = partial(aggregate_sse, chunks, incremental=answer["incremental"])
    expect(survive(aggregate), dict, refused=False)


@given(st.sampled_from(range(len(SSE_FRAMES))), st.booleans(), st.data())
def test_frames_with_hostile_values(which: int, incremental: bool, data: st.DataObject) -> None:
    frames = list(SSE_FRAMES[which])
    at = data.draw(st.integers(0, len(frames) - 1))
    frames[at] = data.draw(hostile_placed(frames[at]))
    outcome = survive(partial(aggregate_frames, frames, incremental=incremental))
    expect(outcome, dict, refused=False)


@given(flat_fields().flatmap(lambda drawn: hostile_placed(drawn[0])), flat_sides)
def test_flat_fields_with_hostile_values(meta_info: Any, side: Any) -> None:
    outcome = survive(partial(decode_flat_top_logprobs, meta_info, side=side))
    expect(outcome, (FlatTopLogprobs, type(None)), refused=False)
    if isinstance(outcome, FlatTopLogprobs):
        rows, k = outcome.shape
        assert len(outcome.values) == len(outcome.token_ids) == rows * k
        nested = survive(outcome.to_nested)
        if outcome.null_prefix + rows > DEFAULT_MAX_NESTED_POSITIONS:  # refused before building
            assert isinstance(nested, LimitExceeded) and nested.bound == "max_nested_positions"
        else:
            assert isinstance(nested, list) and len(nested) == outcome.null_prefix + rows


@given(
    st.sampled_from(RESPONSES).flatmap(hostile_placed),
    st.sampled_from(RESPONSES).flatmap(hostile_placed),
)
def test_merge_with_hostile_values(prefill: Any, decode: Any) -> None:
    outcome = survive(partial(merge_prefill, prefill, decode))
    expect(outcome, dict, refused=False)
    if isinstance(outcome, dict):
        assert type(outcome["meta_info"]) is dict


# --- the command line, in-process ---

CLI_COMMANDS = [
    ["normalize", "--vocab-size", "none", "--role", "aggregated"],
    ["normalize", "--vocab-size", "none", "--role", "prefill", "--bootstrap-host", "h",
     "--bootstrap-port", "1",
     "--bootstrap-room", "2"],
    ["aggregate"],
    ["aggregate", "--cumulative", "--max-bytes", "4096"],
    ["flat"],
    ["flat", "--side", "input"],
]  # fmt: skip


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])  # reset each example
@given(data=hostile_cli_inputs())
def test_cli_on_hostile_bytes(
    data: bytes, monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    """Exit 0, 1 or 2, one JSON object on stdout (an error object unless 0), no traceback."""
    cli = stdin_cli(monkeypatch, capsysbinary)
    for argv in CLI_COMMANDS:
        code, out = cli(argv, data)
        if code == 1:  # only SGLang's own error
            assert argv[0] == "aggregate"
            assert out["error"]["type"] == "engine_error"


def test_cli_reads_files_as_it_reads_stdin(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    for name, data in [("deep", b"[" * 100_000), ("transcript", DEMO_SSE_TRANSCRIPT[:-1])]:
        path = tmp_path / name
        path.write_bytes(data)
        for command in ("normalize", "aggregate", "flat"):
            argv = [
                command,
                str(path),
                *(
                    ["--vocab-size", "none", "--role", "aggregated"]
                    if command == "normalize"
                    else []
                ),
            ]
            code, out = run_cli(argv, capsysbinary)
            assert code == 2
            assert out["error"]["type"] in ("request_rejected", "response_error")


# --- regressions: crashes the audit found ---


@pytest.mark.parametrize(
    ("data", "detail"),
    [
        ('{"rid": "\ud800", "request": {"input_ids": [1]}}', "surrogates not allowed"),
        ('{"rid": "r", "request": {"input_ids": [1], "rid": "\udcff"}}', "surrogates not allowed"),
        (None, "expected bytes or str, got NoneType"),
        ({"rid": "r", "request": {"input_ids": [1]}}, "expected bytes or str, got dict"),
    ],
    ids=["surrogate-rid", "surrogate-in-request", "none", "dict"],
)
def test_decode_envelope_refuses_text_and_types_json_cannot_be(data: object, detail: str) -> None:
    # Was UnicodeEncodeError (text with lone surrogates) or TypeError.
    with pytest.raises(RequestRejected) as caught:
        decode_envelope(data)  # type: ignore[arg-type]
    assert caught.value.code == "invalid_envelope"
    assert detail in caught.value.message


def test_decode_envelope_bounds_text_in_utf8_bytes() -> None:
    wire = '{"rid": "r", "request": {"input_ids": [1], "rid": "ééé"}}'
    assert decode_envelope(wire, max_body_bytes=len(wire.encode())).rid == "r"
    with pytest.raises(RequestRejected) as caught:
        decode_envelope(wire, max_body_bytes=len(wire))  # characters, not bytes
    assert caught.value.code == "body_too_large"


def test_a_memoryview_msgspec_cannot_read_is_rejected() -> None:
    # Was BufferError: msgspec reads only contiguous buffers.
    body = memoryview(b'{"input_ids": [1]}' * 2)[::2]
    with pytest.raises(RequestRejected) as caught:
        decode_client_request(body)  # type: ignore[arg-type]
    assert (caught.value.code, caught.value.message) == (
        "not_json",
        "request body is not valid JSON: memoryview: underlying buffer is not C-contiguous",
    )
    with pytest.raises(RequestRejected) as caught:
        decode_envelope(body)  # type: ignore[arg-type]
    assert caught.value.code == "invalid_envelope"


#: A stream of two incremental frames: "ab" as a whole, "b" as its last frame alone.
_TWO_FRAMES = (
    b'data: {"text": "a", "meta_info": {"finish_reason": null}}\n\n'
    b'data: {"text": "b", "meta_info": {"finish_reason": {"type": "stop"}}}\n\n'
)


@pytest.mark.parametrize(("incremental", "text"), [(True, "ab"), (None, "ab"), (False, "b")])
def test_the_incremental_flag_is_true_false_or_none(incremental: Any, text: str) -> None:
    # aggregate_sse looked its typed views up by the flag itself: KeyError for "yes". The
    # flag is now checked as the relays check it; None: detected from the frames.
    assert aggregate_sse([_TWO_FRAMES], incremental=incremental)["text"] == text
    assert StreamAggregator(incremental=incremental).incremental is incremental
    others: list[Any] = ["yes", 1, 0, ""]
    for other in others:
        with pytest.raises(EnvelopeError, match=r"^incremental: expected True, False or None"):
            aggregate_sse([_TWO_FRAMES], incremental=other)


@pytest.mark.parametrize("frames", [None, 7, 1.5])
def test_frames_and_chunks_that_are_not_iterable(frames: Any) -> None:
    # Was TypeError from the for loop.
    with pytest.raises(EnvelopeError, match="aggregate_frames frames: expected an iterable"):
        aggregate_frames(frames)
    with pytest.raises(EnvelopeError, match="aggregate_sse chunks: expected an iterable"):
        aggregate_sse(frames)


def test_cli_reads_a_unary_body_under_any_max_bytes(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    # Was OverflowError (10**30) or MemoryError (2**40): one read of max-bytes + 1 bytes.
    path = tmp_path / "body.json"
    path.write_bytes(demo_unary_body())
    for limit in (2**40, 2**62, 10**30):
        code, out = run_cli(["aggregate", str(path), "--max-bytes", str(limit)], capsysbinary)
        assert code == 0
        assert out == msgspec.json.decode(demo_unary_body())
    code, out = run_cli(["aggregate", str(path), "--max-bytes", "10"], capsysbinary)
    assert (code, out["error"]["type"]) == (2, "limit_exceeded")


@pytest.mark.parametrize(
    "argv",
    [
        ["normalize", "--vocab-size", "none", "--role", "aggregated", "--rid", "\udcff"],
        [
            "normalize",
            "--role",
            "decode",
            "--bootstrap-host",
            "h\udcff",
            "--bootstrap-port",
            "1",
            "--bootstrap-room",
            "1",
        ],
        ["demo", "\udcff"],
    ],
    ids=["rid", "bootstrap-host", "unrecognized"],
)
def test_cli_argv_that_is_not_utf8_is_a_usage_error(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    # Bytes in argv that are not UTF-8 reach Python as lone surrogates; they
    # escaped as UnicodeEncodeError when written into the JSON output.
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(SEED_REQUEST)))
    code, out = run_cli(argv, capsysbinary, exits=True)
    assert (code, out["error"]["type"]) == (2, "usage")
    assert "\\udcff" in out["error"]["message"]


@pytest.mark.parametrize(
    "index", [10**5000, [[10**5000]], [[[[[[[1]]]]]]]], ids=["int", "nested-int", "deep"]
)
def test_values_too_long_to_print_are_shown_in_bounds(index: Any) -> None:
    # Was ValueError from repr(): ints over 4300 digits have no str().
    frames = [{"index": 1, "meta_info": {}}, {"index": index, "meta_info": {}}]
    with pytest.raises(EnvelopeError, match=r"its index .* differs from the first frame.s 1"):
        aggregate_frames(frames)
    for bad in (-(10**5000), [-(10**5000)]):
        with pytest.raises(EnvelopeError, match="max_bytes: expected a positive integer"):
            aggregate_sse([], max_bytes=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("input_ids", ["\udcff", ["\ud800"], [1, "\udcff"]])
def test_input_ids_holding_text_with_lone_surrogates(input_ids: Any) -> None:
    # Was UnicodeEncodeError from msgspec.convert.
    envelope = to_worker_envelope(decode_client_request({"input_ids": [1]}), rid="r")
    words = r"input_ids(: .*surrogates not allowed| must be a sequence of token ids, got str)"
    with pytest.raises(EnvelopeError, match=words):
        build_engine_request(
            envelope, deployment=DEPLOYMENT, input_ids=input_ids, role="aggregated"
        )


def test_a_count_too_long_to_print_is_shown_by_its_size() -> None:
    # Was ValueError: str() of an int over 4300 digits, in the mismatch message.
    frame = {"output_ids": [1], "meta_info": {"finish_reason": {}, "completion_tokens": 10**5000}}
    with pytest.raises(EnvelopeError, match="completion_tokens is an int of 16610 bits but"):
        aggregate_frames([frame])


@pytest.mark.parametrize("envelope", [None, {"rid": "r", "request": {"input_ids": [1]}}, b"{}"])
def test_an_envelope_of_the_wrong_type_is_the_callers_mistake(envelope: Any) -> None:
    # Was AttributeError: envelope.request.
    with pytest.raises(EnvelopeError, match="envelope must be a WorkerEnvelope, got"):
        build_engine_request(envelope, deployment=DEPLOYMENT, input_ids=[1], role="aggregated")
