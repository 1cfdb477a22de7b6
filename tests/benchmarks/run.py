"""Speed and memory of the hot paths, as ratios to a floor measured in the same run.

    python tests/benchmarks/run.py [--quick]

Each workload is timed alternately with its floor (the bare JSON or Base64
work it cannot avoid), several rounds each; the table shows the medians and
their ratio against the goal. Run it on a quiet machine; it is not part of the
test suite and asserts nothing. With an interpreter that has SGLang (the live
environment's, `live/setup.sh`, or the oracle's, `scripts/oracle/setup.sh`), it also
times SGLang's own request path, and, with NVIDIA Dynamo on the path too (the live
environment's ``dynamo/site``), client bytes to the `GenerateReqInput` SGLang takes
in-process against Dynamo 1.6.1's builder.
"""

from __future__ import annotations

import argparse
import base64
import gc
import importlib
import importlib.util
import os
import platform
import random
import statistics
import sys
import time
import tracemalloc
from collections import deque
from collections.abc import Callable, Iterator
from itertools import repeat
from pathlib import Path
from typing import Any

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sglang_envelope import (
    Bootstrap,
    Deployment,
    RequestRejected,
    Role,
    Target,
    WorkerEnvelope,
    aggregate_sse,
    build_engine_request,
    decode_client_request,
    decode_envelope,
    encode_envelope,
    parse_unary,
    relay_sse,
    to_worker_envelope,
)
from sglang_envelope.flat import decode_flat_top_logprobs, encode_flat_top_logprobs
from sglang_envelope.limits import DEFAULT_MAX_INPUT_IDS, DEFAULT_MAX_JSON_ITEMS
from sglang_envelope.overrides import header_overrides
from sglang_envelope.serve.many import indexed_events
from sglang_envelope.stream import (
    SSE_DONE,
    SseDecoder,
    StreamAggregator,
    aggregate_sse_bytes,
    encode_sse,
)

CHUNK = 64 * 1024

#: A deployment with every check the library makes before dispatch known, as
#: `Deployment.from_server_info` describes a server: the benchmark pays for all of them.
DEPLOYMENT = Deployment(
    vocab_size=151_936,
    context_length=2**20 + 64,
    max_req_input_len=2**20 + 58,
    num_reserved_tokens=0,
    allow_auto_truncate=False,
    dp_size=8,
    skip_tokenizer_init=False,
    enable_custom_logit_processor=False,
    enable_strict_thinking=False,
    hidden_states="off",
    incremental_streaming_output=False,
)


def timed(fn: Callable[[], object]) -> float:
    gc.collect()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def alternate(
    work: Callable[[], object], floor: Callable[[], object], rounds: int
) -> tuple[float, float]:
    """Median seconds of `work` and of `floor`, timed turn about."""
    work(), floor()  # warm up
    works, floors = [], []
    for _ in range(rounds):
        works.append(timed(work))
        floors.append(timed(floor))
    return statistics.median(works), statistics.median(floors)


# --- workloads ---


def client_bodies(
    count: int, rng: random.Random, lengths: tuple[int, ...] = (16, 128, 512, 2048)
) -> list[bytes]:
    """Client requests with prompts of the given lengths, 30% of them unary output-flat."""
    bodies = []
    for i in range(count):
        body: dict[str, Any] = {
            "rid": f"req-{i}",
            "input_ids": [rng.randrange(150_000) for _ in range(rng.choice(lengths))],
            "sampling_params": {
                "temperature": 0.7,
                "top_p": 0.9,
                "max_new_tokens": rng.randrange(1, 4096),
            },
            "stream": rng.random() < 0.5,
        }
        if rng.random() < 0.3:
            body.update(
                stream=False,
                return_logprob=True,
                top_logprobs_num=5,
                return_flat_raw_output_top_logprobs=True,
                return_flat_raw_top_logprobs_b64=True,
            )
        bodies.append(msgspec.json.encode(body))
    return bodies


def request_path(bodies: list[bytes], target: Target | None = None) -> Callable[[], None]:
    bootstrap = Bootstrap("10.0.0.7", 8998, 4242)
    target = target or Target()

    def run() -> None:
        for body in bodies:
            request = decode_client_request(body, target=target)
            envelope = to_worker_envelope(request, rid=request.rid or "rid")
            build_engine_request(
                envelope,
                deployment=DEPLOYMENT,
                input_ids=request.input_ids,
                role=Role.DECODE,
                bootstrap=bootstrap,
            ).to_json()

    return run


def override_or_encode(ids: int) -> tuple[Callable[[], object], Callable[[], object]]:
    """A streaming client's body of `ids` token ids: the override headers for sending it
    as it came (`header_overrides`), and the engine request encoded again (`to_json`)."""
    tokens = [i % 150_000 for i in range(ids)]
    body = msgspec.json.encode({"input_ids": tokens, "stream": True, "rid": "a"})
    request = decode_client_request(body, max_body_bytes=len(body), max_input_ids=ids)
    envelope = to_worker_envelope(request, rid="0123456789abcdef0123456789abcdef")
    engine = build_engine_request(
        envelope, deployment=DEPLOYMENT, input_ids=request.input_ids, role=Role.AGGREGATED
    )
    assert header_overrides(engine, request) is not None
    return (lambda: header_overrides(engine, request)), engine.to_json


def path_lower_bound(bodies: list[bytes], level: str = "no rule") -> Callable[[], None]:
    """The request path's lower bound: the typed decode, the engine body and its encoding,
    with no rule checked (not a path anyone may take: it is the floor of the design);
    at level "every rule", with every rule the path checks, the client's and the
    deployment's, and none of the glue of its four calls; at "every rule and object",
    also the three objects the calls hand back (`ClientRequest`, `WorkerEnvelope`,
    `EngineRequest`), made without their argument checks."""
    from sglang_envelope.request.deployment import check_engine_body
    from sglang_envelope.request.engine import EngineBody, _made
    from sglang_envelope.request.envelope import WorkerEnvelope
    from sglang_envelope.request.fields import RequestFields
    from sglang_envelope.request.limits import DEFAULT_LIMITS
    from sglang_envelope.request.passed import NO_PASSED_FIELDS
    from sglang_envelope.request.rules import DEFAULT_TARGET
    from sglang_envelope.request.types import _DEFAULT_CONTRACT, _from_checked, _Wire

    count = len(RequestFields.__struct_fields__)
    decode, encode = msgspec.json.Decoder(_Wire).decode, msgspec.json.Encoder().encode
    astuple, replace = msgspec.structs.astuple, msgspec.structs.replace

    def run() -> None:
        for body in bodies:
            fields = astuple(decode(body))[:count]
            encode(replace(EngineBody(*fields), rid="r", stream=True, bootstrap_room=4242))

    def run_checked() -> None:
        for body in bodies:
            wire: Any = decode(body)
            _DEFAULT_CONTRACT.check(wire, DEFAULT_LIMITS)
            engine = replace(
                EngineBody(*astuple(wire)[:count]), rid="r", stream=True, bootstrap_room=4242
            )
            check_engine_body(DEPLOYMENT, engine)
            encode(engine)

    def run_with_objects() -> None:
        for body in bodies:
            wire: Any = decode(body)
            _DEFAULT_CONTRACT.check(wire, DEFAULT_LIMITS)
            request = _from_checked(wire, DEFAULT_TARGET, NO_PASSED_FIELDS)
            WorkerEnvelope(rid="r", request=request)
            engine = replace(
                EngineBody(*astuple(request)[:count]),
                rid="r",
                stream=True,
                bootstrap_room=4242,
            )
            check_engine_body(DEPLOYMENT, engine)
            encode(_made(Role.DECODE, engine, NO_PASSED_FIELDS).body)

    levels = {"no rule": run, "every rule": run_checked, "every rule and object": run_with_objects}
    return levels[level]


def rule_checks(bodies: list[bytes], plain: bool) -> Callable[[], None]:
    """The default target's rules on each decoded body: the compiled check the library
    runs, or (`plain`) a plain loop over the same table, guards and shortcuts, which
    the compiled check must beat by 10% to be kept."""
    from sglang_envelope.request import contract as compiled
    from sglang_envelope.request.fields import REQUEST_DEFAULTS, SAMPLING_DEFAULTS
    from sglang_envelope.request.limits import DEFAULT_LIMITS
    from sglang_envelope.request.types import _DEFAULT_CONTRACT, _typed_decode

    contract = _DEFAULT_CONTRACT
    wires = [_typed_decode(body, contract) for body in bodies]
    if not plain:

        def run_compiled() -> None:
            for wire in wires:
                contract.check(wire, DEFAULT_LIMITS)

        return run_compiled

    def holds(test: Any, value: Any) -> bool:
        read = [getattr(value, name) for name in test.fields]
        if test.kind == "false":
            return not read[0]
        if test.kind == "any_true":
            return any(read)
        if test.kind == "nonempty":
            return bool(read[0] != ())
        low = read[0] is None or read[0] > test.low or (read[0] == test.low and not test.open_low)
        return read[0] is None or (low and (test.kind == "at_least" or read[0] <= test.high))

    def scope(checks: Any, value: Any, defaults: Any) -> None:
        for code, field, message, check, guards, shortcut in checks.rules:
            names = [checks.guards[i] for i in guards]
            if names and all(getattr(value, n) is defaults[n] for n in names):
                continue
            if shortcut is not None and holds(shortcut, value):
                continue
            facts = check(value)
            if facts is not None:
                raise RequestRejected(code, field, message.format(**facts))

    request_raw = compiled._REQUEST_RAW_CHECKS
    sampling_raw = compiled._SAMPLING_RAW_CHECKS

    def run() -> None:
        for wire in wires:
            for name, check in request_raw:
                if getattr(wire, name) is not msgspec.UNSET:
                    check(getattr(wire, name), DEFAULT_LIMITS)
            params = wire.sampling_params
            sampled = params is not None and params is not msgspec.UNSET
            for name, check in sampling_raw if sampled else ():
                if getattr(params, name) is not msgspec.UNSET:
                    check(getattr(params, name), DEFAULT_LIMITS)
            scope(contract.request, wire, REQUEST_DEFAULTS)
            if sampled:
                scope(contract.sampling, params, SAMPLING_DEFAULTS)

    return run


def json_floor(bodies: list[bytes]) -> Callable[[], None]:
    def run() -> None:
        for body in bodies:
            msgspec.json.encode(msgspec.json.decode(body))

    return run


def sglang_path(bodies: list[bytes]) -> Callable[[], None] | None:
    """SGLang's own gate plus GenerateReqInput normalization, where SGLang is importable."""
    try:
        io_struct = importlib.import_module("sglang.srt.managers.io_struct")
    except ImportError:
        return None
    generate_req_input = io_struct.GenerateReqInput
    path = Path(str(io_struct.__file__)).parents[2] / "api" / "v1" / "api_types.py"
    spec = importlib.util.spec_from_file_location("_sglang_api_types", path)
    assert spec is not None and spec.loader is not None
    api_types = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(api_types)

    def run() -> None:
        for body in bodies:
            value = msgspec.json.decode(body)
            api_types.GenerateRequest.from_json_value(value)
            generate_req_input(**value).normalize_batch_and_arguments()

    return run


def in_process_paths(
    bodies: list[bytes], mappings: bool = False
) -> tuple[Callable[[], None], Callable[[], None], Callable[[], None]] | None:
    """Client bytes to the `GenerateReqInput` SGLang takes in-process, decode role: the
    library's path (every rule and every deployment rule, `to_dict()`), NVIDIA
    Dynamo 1.6.1's (``json`` and its pydantic-validated `build_native_generate_request`),
    and the library's lower bound, where both are importable (the live environment, with
    Dynamo on the path). `mappings`: from the mapping a Dynamo worker is handed (its
    request plane decoded the client's JSON), as docs/dynamo.md's worker takes it."""
    try:
        generate_req_input = importlib.import_module(
            "sglang.srt.managers.io_struct"
        ).GenerateReqInput
        dynamo = importlib.import_module("dynamo.sglang.engine_generate")
    except ImportError:
        return None
    import json

    bootstrap = Bootstrap("10.0.0.7", 8998, 4242)
    inputs: list[Any] = [json.loads(body) for body in bodies] if mappings else bodies

    def library() -> None:
        for body in inputs:
            request = decode_client_request(body)
            envelope = to_worker_envelope(request, rid="0123456789abcdef0123456789abcdef")
            engine = build_engine_request(
                envelope,
                deployment=DEPLOYMENT,
                input_ids=request.input_ids,
                role=Role.DECODE,
                bootstrap=bootstrap,
            )
            generate_req_input(**engine.to_dict())

    def dynamo_builder() -> None:
        for body in inputs:
            payload = body if mappings else json.loads(body)
            dynamo.build_native_generate_request(
                payload,
                input_ids=payload["input_ids"],
                request_id="0123456789abcdef0123456789abcdef",
                priority=None,
                bootstrap_host="10.0.0.7",
                bootstrap_port=8998,
                bootstrap_room=4242,
            )

    def lower_bound() -> None:
        """The work the path cannot leave out, none of the glue of its four calls: the
        typed decode, the rules, one engine body, the deployment's rules, the keyword
        arguments, `GenerateReqInput`."""
        for body in bodies:
            wire = _typed_decode(body, _DEFAULT_CONTRACT)
            _DEFAULT_CONTRACT.check(wire, DEFAULT_LIMITS)
            serving = ("10.0.0.7", 8998, 4242, None, None, None, None)
            engine = EngineBody(*astuple(wire)[:count], *serving)  # type: ignore[call-arg]
            check_engine_body(DEPLOYMENT, engine)
            kwargs = to_builtins(engine)
            kwargs["input_ids"] = list(kwargs["input_ids"])
            generate_req_input(**kwargs)

    from sglang_envelope.request.deployment import check_engine_body
    from sglang_envelope.request.engine import EngineBody
    from sglang_envelope.request.fields import RequestFields
    from sglang_envelope.request.limits import DEFAULT_LIMITS
    from sglang_envelope.request.types import _DEFAULT_CONTRACT, _typed_decode

    count = len(RequestFields.__struct_fields__)
    astuple, to_builtins = msgspec.structs.astuple, msgspec.to_builtins
    return library, dynamo_builder, lower_bound


def _filled(prefix: bytes, item: bytes, suffix: bytes, count: int) -> bytes:
    return prefix + item * (count - 1) + item.rstrip(b",") + suffix


def hostile_request_bodies(size: int) -> dict[str, bytes]:
    """Bodies within the default bounds built to cost the most memory per byte: up to
    `size` bytes each, the largest each bound allows otherwise."""
    ids = b'{"input_ids":[1],'

    def fill(field: bytes, item: bytes, close: bytes, count: int | None = None) -> bytes:
        return _filled(ids + field, item, close, count or (size - 64) // len(item))

    per_item = DEFAULT_MAX_JSON_ITEMS // 2 - 8  # an item and its comma count two
    members = b",".join(b'"%d":0' % i for i in range(DEFAULT_MAX_JSON_ITEMS - 8))
    return {
        "input_ids, 3-digit ids": _filled(
            b'{"input_ids":[', b"257,", b"]}", min(DEFAULT_MAX_INPUT_IDS, (size - 32) // 4)
        ),
        "token_ids_logprob, -9": fill(b'"token_ids_logprob":[', b"-9,", b"]}"),
        "stop, 2-char strings": fill(b'"sampling_params":{"stop":[', b'"ab",', b"]}}", per_item),
        "custom_params, [[],...]": fill(
            b'"sampling_params":{"custom_params":[', b"[],", b"]}}", per_item
        ),
        "custom_params, {}": fill(b'"session_params":{"a":[', b"{},", b"]}}", per_item),
        "logit_bias, 100k keys": ids + b'"sampling_params":{"logit_bias":{' + members + b"}}}",
        "rid, 4-byte characters": ids
        + b'"rid":"'
        + "\U0001f600".encode() * (size // 4 - 16)
        + b'"}',
    }


def request_peak_memory(body: bytes) -> tuple[int, str]:
    """Peak bytes allocated decoding `body` and writing the engine request of each role
    (one after the other, as a worker does), and the outcome: the worse of a frontend's
    `decode_client_request` and a worker's `decode_envelope` of the same request."""
    bootstrap = Bootstrap("10.0.0.7", 8998, 4242, prefill_dp_rank=1)
    # The worst bodies hold ids no vocabulary has (negative ones in token_ids_logprob):
    # the ids are not checked here, so every role's request is written.
    unchecked = Deployment(vocab_size=None)

    def write_each_role(envelope: WorkerEnvelope) -> None:
        for role in Role:
            build_engine_request(
                envelope,
                deployment=unchecked,
                input_ids=envelope.request.input_ids,
                role=role,
                bootstrap=None if role is Role.AGGREGATED else bootstrap,
            ).to_json()

    def traced(decode: Callable[[], WorkerEnvelope]) -> int:
        gc.collect()
        tracemalloc.start()
        write_each_role(decode())
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return peak

    try:
        wire = encode_envelope(to_worker_envelope(decode_client_request(body), rid="rid"))
    except RequestRejected as error:
        return 0, f"refused: {error.code}"
    frontend = traced(lambda: to_worker_envelope(decode_client_request(body), rid="rid"))
    worker = traced(lambda: decode_envelope(wire))
    return max(frontend, worker), "accepted"


def frame(i: int, rng: random.Random, *, last: bool, logprobs: bool = True) -> dict[str, Any]:
    """One incremental frame: a token, and its logprob with the top 5 when `logprobs`."""
    token = rng.randrange(150_000)
    meta: dict[str, Any] = {
        "id": "req-1",
        "finish_reason": {"type": "length", "length": i + 1} if last else None,
        "prompt_tokens": 100,
        "completion_tokens": i + 1,
        "cached_tokens": 0,
        "e2e_latency": 0.01 * i,
    }
    if logprobs:
        top = [[-rng.random() * 5, rng.randrange(150_000), None] for _ in range(5)]
        meta["output_token_logprobs"] = [[top[0][0], token, None]]
        meta["output_top_logprobs"] = [top]
    return {"text": f" word{token}", "output_ids": [token], "meta_info": meta}


def incremental_transcript(
    count: int, seed: int = 1, *, logprobs: bool = True
) -> tuple[bytes, list[bytes]]:
    rng = random.Random(seed)
    frames = [frame(i, rng, last=i == count - 1, logprobs=logprobs) for i in range(count)]
    payloads = [msgspec.json.encode(f) for f in frames]
    return b"".join(encode_sse(f) for f in frames) + SSE_DONE, payloads


def cumulative_transcript(count: int, seed: int = 1) -> tuple[bytes, list[bytes]]:
    rng = random.Random(seed)
    text, ids, token_lps, tops = "", [], [], []
    payloads = []
    for i in range(count):
        delta = frame(i, rng, last=i == count - 1)
        text += delta["text"]
        ids += delta["output_ids"]
        token_lps += delta["meta_info"]["output_token_logprobs"]
        tops += delta["meta_info"]["output_top_logprobs"]
        meta = {
            **delta["meta_info"],
            "output_token_logprobs": token_lps,
            "output_top_logprobs": tops,
        }
        payloads.append(msgspec.json.encode({"text": text, "output_ids": ids, "meta_info": meta}))
    transcript = b"".join(b"data: " + p + b"\n\n" for p in payloads) + SSE_DONE
    return transcript, payloads


def chunks(data: bytes) -> Iterator[memoryview]:
    view = memoryview(data)
    return (view[i : i + CHUNK] for i in range(0, len(view), CHUNK))


# --- relay ---


def relay(transcript: bytes | list[bytes], **options: Any) -> Callable[[], None]:
    """relay_sse over the transcript (64 KiB chunks, or the chunks given), each output
    dropped once made, as a server drops what it has sent."""

    def run() -> None:
        deque(
            relay_sse(
                chunks(transcript) if isinstance(transcript, bytes) else transcript, **options
            ),
            0,
        )

    return run


def write(sent: list[bytes]) -> Callable[[], None]:
    """The floor of a converting relay: writing the bytes it sent, from their JSON,
    each piece dropped once made."""
    views = [memoryview(piece) for piece in sent]

    def run() -> None:
        deque((b"".join((view[:6], view[6:-2], view[-2:])) for view in views), 0)

    return run


def split_events(transcript: bytes) -> Callable[[], None]:
    """The floor of a relay that checks nothing: the SSE events split out, no JSON read."""

    def run() -> None:
        decoder = SseDecoder()
        for chunk in chunks(transcript):
            decoder.feed_payloads(chunk)

    return run


class _Nothing(msgspec.Struct):
    pass


def split_and_validate(transcript: bytes) -> Callable[[], None]:
    """Splitting, and msgspec validating each event's JSON without building it."""
    validate = msgspec.json.Decoder(_Nothing).decode

    def run() -> None:
        decoder = SseDecoder()
        for chunk in chunks(transcript):
            for payload in decoder.feed_payloads(chunk):
                validate(payload)

    return run


def split_and_mark(transcript: bytes) -> Callable[[], None]:
    """The least a checked same-mode relay does: each chunk's complete events split out
    (one copy, one split), and the tests that let a middle frame go out unparsed (a
    ``data: `` line, one ``"finish_reason"`` an event, ``"finish_reason":null`` in each,
    no escape); no state kept, no faults read, nothing else checked."""

    def run() -> None:
        rest = b""
        for chunk in chunks(transcript):
            data = rest + bytes(chunk)
            end = data.rfind(b"\n\n") + 2
            events, rest = data[:end], data[end:]
            lines = events.split(b"\n")
            middle = lines[:-1:2]
            assert not any(lines[1::2])
            assert all(map(bytes.startswith, middle, repeat(b"data: ")))
            if events.count(b'"finish_reason"') == len(middle):  # not the last chunk
                assert min(map(bytes.find, middle, repeat(b'"finish_reason":null'))) >= 0
                assert b"\\" not in events

    return run


class _Meta(msgspec.Struct, gc=False):
    output_token_logprobs: list[Any] = []
    output_top_logprobs: list[Any] = []


class _Deltas(msgspec.Struct, gc=False):
    text: str = ""
    output_ids: list[int] = []
    meta_info: _Meta = msgspec.field(default_factory=_Meta)


def deltas_kept(transcript: bytes) -> Callable[[], object]:
    """The least an aggregator returning Python lists does: each chunk's events split out
    (one copy, one split) and their delta fields decoded (every other key skipped
    unchecked) and kept, joined; no state across events, no faults read, no checks."""
    decode = msgspec.json.Decoder(_Deltas).decode

    def run() -> object:
        text, ids, token_logprobs, top_logprobs = [], [], [], []
        rest = b""
        for chunk in chunks(transcript):
            data = rest + bytes(chunk)
            end = data.rfind(b"\n\n") + 2
            lines, rest = data[:end].split(b"\n"), data[end:]
            for line in lines[:-1:2]:
                if line != b"data: [DONE]":
                    frame = decode(line[6:])
                    text.append(frame.text)
                    ids += frame.output_ids
                    token_logprobs += frame.meta_info.output_token_logprobs
                    top_logprobs += frame.meta_info.output_top_logprobs
        return "".join(text), ids, token_logprobs, top_logprobs

    return run


def old_recipe(transcript: bytes) -> Callable[[], int]:
    """The relay recipe before relay_sse: every frame decoded, cumulative() encoded again."""

    def run() -> int:
        decoder, aggregator, sent = SseDecoder(), StreamAggregator(), 0
        for chunk in chunks(transcript):
            for frame in decoder.feed(chunk):
                aggregator.add(frame)
                sent += len(encode_sse(aggregator.cumulative()))
        decoder.close()
        return sent

    return run


def one_token_frames(count: int) -> bytes:
    """`count` frames of one token id each, as SGLang streams a skip_tokenizer_init request."""
    frames = [
        {
            "output_ids": [i % 1000],
            "meta_info": {
                "finish_reason": {"type": "length"} if i == count - 1 else None,
                "completion_tokens": i + 1,
            },
        }
        for i in range(count)
    ]
    return b"".join(encode_sse(frame) for frame in frames) + SSE_DONE


def relay_rows(quick: bool, rounds: int, row: Callable[..., None]) -> None:
    frames = 2000
    transcript, _ = incremental_transcript(frames)
    same = relay(transcript, incremental=True, client_incremental=True)
    work, floor = alternate(same, split_events(transcript), rounds)
    row(
        f"relay, same mode, incremental, {frames} frames",
        work,
        floor,
        "<= 2.0x",
        work <= 2.0 * floor,
    )
    work, floor = alternate(same, split_and_validate(transcript), rounds)
    row("  against splitting and validating the JSON", work, floor, "(reference)", True)
    work, floor = alternate(same, lambda: aggregate_sse(chunks(transcript)), rounds)
    row("  against aggregate_sse of the same stream", work, floor, "(reference)", True)
    work, floor = alternate(split_and_mark(transcript), split_events(transcript), rounds)
    row("  lower bound: splitting and the per-event tests alone", work, floor, "(reference)", True)
    cum_frames = 300 if quick else 600
    cumulative, _ = cumulative_transcript(cum_frames)
    work, floor = alternate(relay(cumulative, incremental=False), split_events(cumulative), rounds)
    row(
        f"relay, same mode, cumulative, {cum_frames} frames",
        work,
        floor,
        "<= 2.0x",
        work <= 2.0 * floor,
    )

    goal = "<= 2.0x writing the same bytes"
    for frames in (500, 1000) if quick else (1000, 2000):
        transcript, _ = incremental_transcript(frames, seed=4)
        events = [event + b"\n\n" for event in transcript[:-2].split(b"\n\n")]
        sent = list(relay_sse(events, incremental=True))
        assert b"".join(sent) == cumulative_transcript(frames, seed=4)[0]  # SGLang's frames
        work, floor = alternate(relay(events, incremental=True), write(sent), rounds)
        name = f"relay, incremental -> cumulative, {frames} frames, an event a chunk"
        row(name, work, floor, goal, work <= 2 * floor)

    frames = 10_000 if quick else 40_000
    transcript = one_token_frames(frames)
    old_s = timed(old_recipe(transcript))
    new_s = statistics.median(timed(relay(transcript, incremental=True)) for _ in range(rounds))
    speedup = old_s / new_s
    goal = f"(old: cumulative() per frame) {speedup:.0f}x faster"
    row(f"  {frames} one-token frames, 64 KiB chunks", new_s, old_s, goal, True)
    big = one_token_frames(4 * frames)
    small_s, big_s = alternate(relay(transcript, incremental=True), relay(big, incremental=True), 3)
    scale = big_s / small_s
    row(f"  4x frames ({4 * frames}) vs {frames}", big_s, small_s, "<= 4.4x", scale <= 4.4, scale)


def many_rows(quick: bool, rounds: int, row: Callable[..., None]) -> None:
    """Many sequences: SGLang's interleaved stream of 8, read with ``choices=``, against the
    8 streams read one by one; and the service's merge (`indexed_events`) of 8 streams, an
    event a chunk as the relay yields them, against splitting the same events."""
    count, per = 8, 100 if quick else 250
    streams = [incremental_transcript(per, seed=10 + k)[1] for k in range(count)]
    alone = [b"".join(b"data: " + p + b"\n\n" for p in frames) + SSE_DONE for frames in streams]
    interleaved = b"".join(
        b"data: " + streams[k][i][:-1] + b',"index":%d}\n\n' % k
        for i in range(per)
        for k in range(count)
    )
    interleaved += SSE_DONE
    work, floor = alternate(
        lambda: aggregate_sse(chunks(interleaved), choices=count),
        lambda: [aggregate_sse(chunks(one)) for one in alone],
        rounds,
    )
    name = f"many sequences: {count} x {per} frames interleaved, choices={count}"
    row(name, work, floor, "(reference)", True)
    events = [[b"data: " + p + b"\n\n" for p in frames] for frames in streams]

    def merge() -> None:
        for k, one in enumerate(events):
            decoder = SseDecoder()
            for event in one:
                indexed_events(decoder, event, k)

    def split() -> None:
        for one in events:
            decoder = SseDecoder()
            for event in one:
                decoder.feed_payloads(event)

    work, floor = alternate(merge, split, rounds)
    row(
        "  the service's merge of the 8 streams (index added)",
        work,
        floor,
        "<= 2.0x",
        work / floor <= 2.0,
    )


def flat_fields(positions: int, k: int) -> dict[str, Any]:
    rng = random.Random(3)
    nested = [
        [[-rng.random() * 9, rng.randrange(150_000), None] for _ in range(k)]
        for _ in range(positions)
    ]
    return encode_flat_top_logprobs(nested, side="output", top_logprobs_num=k, b64=True)


# --- the table ---


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and smaller inputs")
    args = parser.parse_args()
    rounds = 5 if args.quick else 11
    rows: list[tuple[str, str, str, str, str]] = []

    def row(
        name: str, work_s: float, floor_s: float, goal: str, ok: bool, ratio: float | None = None
    ) -> None:
        shown = work_s / floor_s if ratio is None else ratio
        rows.append(
            (
                name,
                f"{work_s * 1e3:9.2f} ms",
                f"{floor_s * 1e3:9.2f} ms",
                f"{shown:6.2f}x",
                f"{goal} {'ok' if ok else 'MISSED'}",
            )
        )

    bodies = client_bodies(500 if args.quick else 3000, random.Random(7))
    work, floor = alternate(request_path(bodies), json_floor(bodies), rounds)
    row("request path (decode role)", work, floor, "<= 1.5x", work / floor <= 1.5)
    work, floor = alternate(path_lower_bound(bodies), json_floor(bodies), rounds)
    row("  lower bound: typed decode + engine body + encode, no rule", work, floor, "(ref)", True)
    work, floor = alternate(path_lower_bound(bodies, "every rule"), json_floor(bodies), rounds)
    row("  lower bound with every rule, no glue", work, floor, "(reference)", True)
    sglang = sglang_path(bodies)
    if sglang is not None:
        work, floor = alternate(sglang, json_floor(bodies), rounds)
        row("  SGLang's own gate + normalize", work, floor, "(reference)", True)
    short = client_bodies(len(bodies), random.Random(8), lengths=(16,))
    work, floor = alternate(request_path(short), json_floor(short), rounds)
    row("  16-token prompts only", work, floor, "<= 4.0x", work / floor <= 4.0)
    work, floor = alternate(path_lower_bound(short), json_floor(short), rounds)
    row("  lower bound, 16-token prompts", work, floor, "(reference)", True)
    work, floor = alternate(path_lower_bound(short, "every rule"), json_floor(short), rounds)
    row("  lower bound with every rule, no glue, 16-token", work, floor, "(reference)", True)
    objects = path_lower_bound(short, "every rule and object")
    work, floor = alternate(objects, json_floor(short), rounds)
    row("    and the three objects the calls hand back", work, floor, "(reference)", True)
    work, floor = alternate(rule_checks(short, False), rule_checks(short, True), rounds)
    row(
        "  the compiled rules vs a plain loop, 16-token",
        work,
        floor,
        "(<= 0.9x: kept)",
        work / floor <= 0.9,
    )
    prompts = [decode_client_request(body).input_ids or (0,) for body in bodies]
    work, floor = alternate(lambda: [max(p) for p in prompts], json_floor(bodies), rounds)
    row(
        "  of the request path: the vocabulary's max() over the ids",
        work,
        floor,
        "(reference)",
        True,
    )
    in_process = Target(sglang="0.5.22", transport="engine")
    work, floor = alternate(request_path(short, in_process), json_floor(short), rounds)
    row("  16-token, target 0.5.22 in-process", work, floor, "(per target)", True)
    if sglang is not None:
        sglang_short = sglang_path(short)
        assert sglang_short is not None
        work, floor = alternate(sglang_short, json_floor(short), rounds)
        row("  SGLang's own, 16-token prompts", work, floor, "(reference)", True)

    for name, some in (("mixed", bodies), ("16-token", short)):
        paths = in_process_paths(some)
        if paths is None:
            if name == "mixed":
                print("(no SGLang with Dynamo importable: the in-process rows are skipped)")
            continue
        library, dynamo_builder, lower_bound = paths
        work, floor = alternate(library, dynamo_builder, rounds)
        ok = work / floor <= 0.7
        row(f"  to GenerateReqInput vs Dynamo 1.6.1, {name}", work, floor, "<= 0.7x", ok)
        work, floor = alternate(lower_bound, dynamo_builder, rounds)
        row(f"    its lower bound (no glue), {name}", work, floor, "(reference)", True)
        from_mappings = in_process_paths(some, mappings=True)
        assert from_mappings is not None
        work, floor = alternate(*from_mappings[:2], rounds)
        row(f"    from Dynamo's mapping, both, {name}", work, floor, "(reference)", True)

    ids = DEFAULT_MAX_INPUT_IDS // (8 if args.quick else 1)
    work, floor = alternate(*override_or_encode(ids), rounds)
    row(f"  override headers vs to_json, {ids:,} ids", work, floor, "(reference)", True)

    body_size = (4 if args.quick else 16) * 2**20
    worst_name, worst_ratio, worst_peak, worst_size = "", 0.0, 0, 1
    for name, body in hostile_request_bodies(body_size).items():
        peak, outcome = request_peak_memory(body)
        if outcome == "accepted" and peak / len(body) > worst_ratio:
            worst_name, worst_ratio, worst_peak, worst_size = (
                name,
                peak / len(body),
                peak,
                len(body),
            )
    rows.append(
        (
            f"request peak memory, worst body: {worst_name}",
            f"{worst_peak / 2**20:9.1f} MiB",
            f"{worst_size / 2**20:9.1f} MiB",
            f"{worst_ratio:6.2f}x",
            f"<= 12x {'ok' if worst_ratio <= 12 else 'MISSED'} (decode, 3 roles' to_json)",
        )
    )

    frames = 2000
    transcript, payloads = incremental_transcript(frames)

    def decode_each() -> None:
        decode = msgspec.json.decode
        for payload in payloads:
            decode(payload)

    work, floor = alternate(lambda: aggregate_sse(chunks(transcript)), decode_each, rounds)
    row(f"incremental SSE, {frames} frames", work, floor, "<= 2.5x", work / floor <= 2.5)
    work, floor = alternate(
        lambda: aggregate_sse(chunks(transcript)),
        lambda: [msgspec.json.decode(p) for p in payloads],
        rounds,
    )
    row("  floor keeping the decoded frames", work, floor, "(reference)", True)
    work, floor = alternate(deltas_kept(transcript), decode_each, rounds)
    row(
        "  lower bound: events split, the deltas alone decoded and kept",
        work,
        floor,
        "(reference)",
        True,
    )
    big, _ = incremental_transcript(4 * frames, seed=2)
    small_s, big_s = alternate(
        lambda: aggregate_sse(chunks(transcript)), lambda: aggregate_sse(chunks(big)), rounds
    )
    scale = big_s / small_s
    row(f"  4x frames ({4 * frames}) vs {frames}", big_s, small_s, "(reference)", True, scale)
    _, big_payloads = incremental_transcript(4 * frames, seed=2)
    floor_small, floor_big = alternate(
        lambda: [msgspec.json.decode(p) for p in payloads],
        lambda: [msgspec.json.decode(p) for p in big_payloads],
        rounds,
    )
    growth = scale / (floor_big / floor_small)
    row(
        "  its growth against the keeping floor's growth",
        big_s,
        floor_big,
        "<= 1.15x",
        growth <= 1.15,
        growth,
    )
    newer = transcript.replace(b'"meta_info":{', b'"meta_info":{"new_key":0,')
    newer_s, known_s = alternate(
        lambda: aggregate_sse(chunks(newer)), lambda: aggregate_sse(chunks(transcript)), rounds
    )
    row(
        "  a meta_info key SGLang 0.5.23 does not write, in every frame, vs none",
        newer_s,
        known_s,
        "<= 1.25x",
        newer_s <= 1.25 * known_s,
    )

    cum_frames = 300 if args.quick else 600
    transcript, payloads = cumulative_transcript(cum_frames)
    work, floor = alternate(
        lambda: aggregate_sse(chunks(transcript)),
        lambda: [msgspec.json.decode(p) for p in payloads],
        rounds,
    )
    speedup = floor / work
    goal = f"<= 0.33x (3x faster): {speedup:.0f}x faster"
    row(f"cumulative SSE, {cum_frames} frames", work, floor, goal, speedup >= 3)

    relay_rows(args.quick, rounds, row)
    many_rows(args.quick, rounds, row)

    fields = flat_fields(32_768, 20)
    val, idx = (
        fields["output_top_logprobs_val_flat_b64"],
        fields["output_top_logprobs_idx_flat_b64"],
    )

    def decode_flat() -> None:
        flat = decode_flat_top_logprobs(fields, side="output")
        assert flat is not None
        flat.values[-1], flat.token_ids[-1]

    work, floor = alternate(
        decode_flat, lambda: (base64.b64decode(val), base64.b64decode(idx)), rounds
    )
    row("flat Base64 decode, 32768 x 20", work, floor, "<= 1.5x", work / floor <= 1.5)

    stream_mib = 16 if args.quick else 64
    for logprobs in (True, False):
        peak, peak_bytes, result_json, result_objects = peak_memory(stream_mib, logprobs=logprobs)
        what = "token + top-5 logprobs" if logprobs else "text + ids only"
        rows.append(
            (
                f"peak memory, {stream_mib} MiB stream, {what}",
                f"{peak / 2**20:9.1f} MiB",
                f"{result_json / 2**20:9.1f} MiB",
                f"{peak / result_json:6.2f}x",
                f"(reference: result objects alone {result_objects / result_json:.2f}x)",
            )
        )
        rows.append(
            (
                "  aggregate_sse_bytes",
                f"{peak_bytes / 2**20:9.1f} MiB",
                f"{result_json / 2**20:9.1f} MiB",
                f"{peak_bytes / result_json:6.2f}x",
                f"<= 2.0x {'ok' if peak_bytes <= 2 * result_json else 'MISSED'}",
            )
        )
    big_stream = memory_stream(stream_mib, logprobs=True)
    work, floor = alternate(
        lambda: aggregate_sse_bytes(chunks(big_stream), max_bytes=len(big_stream)),
        lambda: aggregate_sse(chunks(big_stream), max_bytes=len(big_stream)),
        3,
    )
    row(
        f"aggregate_sse_bytes vs aggregate_sse, {stream_mib} MiB",
        work,
        floor,
        "<= 1.0x",
        work <= floor,
    )

    terminal_mib = 4 if args.quick else 16
    stream_peak, unary_peak, size = terminal_frame_memory(terminal_mib)
    # The stream holds the event's bytes until its blank line; parse_unary's body is the
    # caller's, allocated before tracing: the floor is parse_unary's peak plus the frame.
    held = unary_peak + size
    rows.append(
        (
            f"peak memory, a {size / 2**20:.0f} MiB terminal frame",
            f"{stream_peak / 2**20:9.1f} MiB",
            f"{held / 2**20:9.1f} MiB",
            f"{stream_peak / held:6.2f}x",
            f"<= 1.1x parse_unary + frame {'ok' if stream_peak <= 1.1 * held else 'MISSED'}",
        )
    )

    machine = f"{platform.machine()}, {os.cpu_count()} cpus"
    print(f"Python {platform.python_version()} on {machine}; msgspec {msgspec.__version__}")
    header = ("workload", "time", "floor", "ratio", "goal")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(5)]
    for r in [header, tuple("-" * w for w in widths), *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(r, widths, strict=True)))


def memory_stream(stream_mib: int, *, logprobs: bool) -> bytes:
    """An incremental stream of about `stream_mib` MiB, one token a frame."""
    one, _ = incremental_transcript(1, logprobs=logprobs)
    count = stream_mib * 2**20 // (len(one) - len(SSE_DONE))
    return incremental_transcript(count, seed=5, logprobs=logprobs)[0]


def peak_memory(stream_mib: int, *, logprobs: bool) -> tuple[int, int, int, int]:
    """Peak bytes allocated aggregating a `stream_mib` MiB stream with aggregate_sse and with
    aggregate_sse_bytes, the result's JSON size, and the peak of merely decoding that JSON
    (what the result's objects cost by themselves)."""
    transcript = memory_stream(stream_mib, logprobs=logprobs)
    tracemalloc.start()
    result = aggregate_sse(chunks(transcript), max_bytes=len(transcript) + 1)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    encoded = msgspec.json.encode(result)
    del result
    tracemalloc.start()
    as_bytes = aggregate_sse_bytes(chunks(transcript), max_bytes=len(transcript) + 1)
    _, peak_bytes = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert msgspec.json.decode(as_bytes) == msgspec.json.decode(encoded)
    del as_bytes
    tracemalloc.start()
    decoded = msgspec.json.decode(encoded)
    _, objects = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del decoded
    return peak, peak_bytes, len(encoded), objects


def terminal_frame_memory(mib: int) -> tuple[int, int, int]:
    """Peak bytes of aggregate_sse on an incremental stream whose terminal frame is `mib` MiB,
    peak bytes of parse_unary on that frame alone, and the frame's size."""
    rng = random.Random(6)
    first = frame(0, rng, last=False)
    terminal = frame(1, rng, last=True)
    one = msgspec.json.encode(terminal["meta_info"]["output_top_logprobs"][0])
    rows = mib * 2**20 // (len(one) + 1)
    terminal["meta_info"]["output_top_logprobs"] *= rows
    terminal["meta_info"]["completion_tokens"] = 2
    body = msgspec.json.encode(terminal)
    stream = encode_sse(first) + b"data: " + body + b"\n\n" + SSE_DONE
    peaks = []
    runs: list[Callable[[], object]] = [
        lambda: aggregate_sse(chunks(stream), max_bytes=2 * len(stream)),
        lambda: parse_unary(body, max_bytes=2 * len(body)),
    ]
    for run in runs:
        tracemalloc.start()
        run()
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    return peaks[0], peaks[1], len(body)


if __name__ == "__main__":
    main()
