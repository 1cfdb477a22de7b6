"""The live fuzz: random bodies the library accepts, sent to a real SGLang server.

Each body is drawn from the project's own Hypothesis strategies
(`tests/strategies.py`, `client_requests`), kept inside what a tiny model can
serve (ids in [3, 320), few new tokens, `logprob_start_len` inside the prompt),
then taken through `decode_client_request`, `to_worker_envelope` and
`build_engine_request`; what the library builds is posted. Every body must get
an answer (any status) and the server must stay alive.

    python live/fuzz.py --count 10000 [--url URL | --kind KIND] [--concurrency N] [--seed N]
                        [--refusals] [--crashes FILE]

Without `--url` it starts its own default server (and starts it again after a
crash). It prints one line: bodies sent, statuses seen, crashes.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the repository's root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from live.flow import engine_request
from live.servers import KIND_FLAGS, LiveServer, attach, start_server
from sglang_envelope import (
    EnvelopeError,
    Role,
    decode_client_request,
    to_worker_envelope,
)
from tests.strategies import client_requests

VOCAB_LOW, VOCAB = 3, 320
MAX_NEW_TOKENS = 8
#: Keys this server refuses whenever set (no LoRA, no hidden states, no such session): four
#: bodies in five drop them, so that the rest reach the scheduler.
DEPLOYMENT_REFUSED = ("lora_path", "return_hidden_states", "session_params")
TIMEOUT = httpx.Timeout(120.0, connect=10.0)
_COUNTING = threading.Lock()  # the threads of a batch count into one tally


def _in_vocab(token: int) -> int:
    return VOCAB_LOW + token % (VOCAB - VOCAB_LOW)


def _small_sampling(draw: st.DrawFn, sampling: dict[str, Any]) -> dict[str, Any]:
    sampling = dict(sampling)
    if "max_new_tokens" in sampling:
        keep_null = sampling["max_new_tokens"] is None and draw(st.integers(0, 19)) == 0
        if not keep_null:  # null asks for the whole context: about 1.5 s of tokens
            sampling["max_new_tokens"] = draw(st.integers(0, MAX_NEW_TOKENS))
    if "min_new_tokens" in sampling:
        high = sampling.get("max_new_tokens", MAX_NEW_TOKENS)
        sampling["min_new_tokens"] = draw(st.integers(0, MAX_NEW_TOKENS if high is None else high))
    if "stop_token_ids" in sampling:
        sampling["stop_token_ids"] = [_in_vocab(t) for t in sampling["stop_token_ids"]]
    if "logit_bias" in sampling:
        bias = sampling["logit_bias"]
        sampling["logit_bias"] = {str(_in_vocab(int(key))): value for key, value in bias.items()}
    return sampling


_floats = st.floats(allow_nan=False, allow_infinity=False, width=32)
_short = st.text(min_size=1, max_size=6)
#: Fields `client_requests` never draws, all of which the library accepts (SGLang may not).
MORE_SAMPLING = {
    "min_p": st.floats(0, 1),
    "frequency_penalty": st.floats(-2, 2),
    "presence_penalty": st.floats(-2, 2),
    "repetition_penalty": st.floats(0, 2),
    "json_schema": st.sampled_from(['{"type": "object"}', '{"type": "string"}', "{", "[]"]),
    "regex": st.sampled_from(["[a-z]+", "(", "\\d{2}", ""]),
    "ebnf": st.sampled_from(['root ::= "a"+', "root ::=", "x"]),
    "structural_tag": st.sampled_from(["{}", "x"]),
    "stop_regex": st.sampled_from(["a", "(", ["b", "c"]]),
    "no_stop_trim": st.booleans(),
    "spaces_between_special_tokens": st.booleans(),
    "stream_interval": st.none() | st.integers(0, 5),
    "ebnf_full_assistant": st.booleans(),
    "choice": st.lists(_short, max_size=3),
    "temperature": st.just(0) | _floats.filter(lambda x: 0 <= x <= 2),
}
MORE_FIELDS = {
    "return_sampling_mask": st.booleans(),
    "sampling_logprobs_mode": st.sampled_from(["selected", "support"]),
    "return_entropy": st.booleans(),
    "return_prompt_token_ids": st.booleans(),
    "return_indexer_topk": st.booleans(),
    "conversation_id": _short,
    "require_reasoning": st.booleans(),
    "max_thinking_tokens": st.integers(0, 8),
    "cache_salt": _short,
    "no_logs": st.booleans(),
    "custom_logit_processor": _short,
    "multi_item_delimiter_indices": st.lists(st.integers(0, 10), max_size=3),
    "token_indices_to_pool": st.lists(st.integers(0, 10), max_size=3),
}


def _some(draw: st.DrawFn, fields: dict[str, Any]) -> dict[str, Any]:
    keys = draw(st.lists(st.sampled_from(sorted(fields)), max_size=3, unique=True))
    return {key: draw(fields[key]) for key in keys}


@st.composite
def live_requests(draw: st.DrawFn) -> dict[str, Any]:
    """A body every rule accepts, inside the tiny model's vocabulary and context."""
    body: dict[str, Any] = draw(client_requests())
    for key in DEPLOYMENT_REFUSED:  # refused by this server before the scheduler sees them
        if body.get(key) and draw(st.integers(0, 4)) > 0:
            del body[key]
    body["input_ids"] = [_in_vocab(token) for token in body["input_ids"]]
    if "token_ids_logprob" in body:
        body["token_ids_logprob"] = [_in_vocab(token) for token in body["token_ids_logprob"]]
    if "logprob_start_len" in body:
        body["logprob_start_len"] = min(body["logprob_start_len"], len(body["input_ids"]) - 1)
    if "sampling_params" in body:
        body["sampling_params"] = _small_sampling(draw, body["sampling_params"])
    else:  # SGLang's default is 128 new tokens
        body["sampling_params"] = {"max_new_tokens": draw(st.integers(0, MAX_NEW_TOKENS))}
    if draw(st.booleans()):
        body["sampling_params"].update(_some(draw, MORE_SAMPLING))
        body.update(_some(draw, MORE_FIELDS))
    return body


@dataclass
class Crash:
    """The bodies in flight when the server died (one, unless sent concurrently)."""

    bodies: list[dict[str, Any]]
    engine_bodies: list[str]
    log_tail: str


@dataclass
class Tally:
    sent: int = 0
    refused_by_library: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    crashes: list[Crash] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    refusals: Counter[str] = field(default_factory=Counter)
    server_errors: list[str] = field(default_factory=list)
    unanswered: list[str] = field(default_factory=list)

    def summary(self) -> str:
        statuses = ", ".join(f"{key}: {count}" for key, count in sorted(self.statuses.items()))
        return (
            f"live fuzz: {self.sent} bodies sent ({self.refused_by_library} refused by the "
            f"library before dispatch); statuses {{{statuses}}}; {len(self.crashes)} crashes"
        )


def engine_body(body: dict[str, Any]) -> bytes | None:
    """What the library sends SGLang for `body` (aggregated), or None when it refuses it."""
    try:
        request = decode_client_request(json.dumps(body).encode())
        envelope = to_worker_envelope(request, rid=request.rid or uuid.uuid4().hex)
        engine = engine_request(envelope, role=Role.AGGREGATED)
    except EnvelopeError:
        return None
    return engine.to_json()


def _words(message: str) -> str:
    """A refusal's words without its values: one kind of refusal reads the same each time."""
    message = re.sub(
        r"session id .* does not exist", "session id _ does not exist", message, flags=re.S
    )
    return re.sub(r"'[^']*'|\d+(\.\d+)?", "_", message)[:110]


def _last_frame(data: bytes) -> Any:
    events = [e for e in data.split(b"\n\n") if e.startswith(b"data: {")]
    return json.loads(events[-1][len(b"data: ") :]) if events else None


def verdict(content_type: str, data: bytes) -> tuple[str, str]:
    """What an answer is (`json`, `sse`, `sse-error`: an error frame, `sse-abort`: a frame that
    ends with SGLang's abort finish reason, `sse-unended`: no `[DONE]`), and the words of its
    refusal, if any."""
    streamed = content_type.startswith("text/event-stream")
    if streamed and not data.rstrip().endswith(b"data: [DONE]"):
        return "sse-unended", "(a stream without data: [DONE])"
    try:
        answer = _last_frame(data) if streamed else json.loads(data)
    except ValueError:
        return ("sse" if streamed else "json"), "(unreadable)"
    kind = "sse" if streamed else "json"
    if isinstance(answer, list):  # n > 1
        answer = answer[-1]
    if not isinstance(answer, dict):
        return kind, ""
    error = answer.get("error")
    if isinstance(error, dict):
        return kind + ("-error" if streamed else ""), _words(str(error.get("message")))
    if answer.get("object") == "error" or error is not None:
        return kind, _words(str(answer.get("message", error)))
    reason = (answer.get("meta_info") or {}).get("finish_reason") or {}
    if isinstance(reason, dict) and reason.get("type") == "abort":
        return kind + "-abort", _words(str(reason.get("message")))
    return kind, ""


def post(http: httpx.Client, url: str, body: bytes) -> tuple[str, str]:
    """The answer's status and kind (`verdict`), and its refusal's words."""
    headers = {"Content-Type": "application/json"}
    with http.stream("POST", f"{url}/generate", content=body, headers=headers) as answer:
        data = answer.read()
    kind, words = verdict(answer.headers.get("content-type", ""), data)
    return f"{answer.status_code}/{kind}", words


def send(http: httpx.Client, url: str, wire: bytes, tally: Tally) -> None:
    try:
        status, words = post(http, url, wire)
    except httpx.HTTPError as error:
        with _COUNTING:
            tally.errors[type(error).__name__] += 1
            tally.unanswered.append(f"{error!r}: {wire.decode()}")
        return
    with _COUNTING:
        tally.statuses[status] += 1
        if words:
            tally.refusals[f"{status}: {words}"] += 1
        if status.startswith("5"):  # SGLang's own fault: keep what caused it
            tally.server_errors.append(wire.decode())


def send_batch(
    http: httpx.Client, server: LiveServer, bodies: list[dict[str, Any]], tally: Tally
) -> bool:
    """Send the bodies at once (SGLang batches them together); False when the server died
    (recorded in `tally`)."""
    wires = [engine_body(body) for body in bodies]
    sent = [(body, wire) for body, wire in zip(bodies, wires, strict=True) if wire is not None]
    tally.refused_by_library += len(bodies) - len(sent)
    tally.sent += len(sent)
    with ThreadPoolExecutor(max(1, len(sent))) as pool:
        for _ in pool.map(lambda wire: send(http, server.url, wire, tally), [w for _, w in sent]):
            pass
    if server.alive():
        return True
    time.sleep(1.0)  # let the dying processes write their tracebacks
    crash = Crash([b for b, _ in sent], [w.decode() for _, w in sent], server.tail(60))
    tally.crashes.append(crash)
    return False


def fuzz(
    server: LiveServer, count: int, *, seed_value: int | None = None, concurrency: int = 1
) -> Tally:
    """Send `count` drawn bodies to `server`, `concurrency` at a time; after a crash, start the
    server again if it is ours."""
    tally = Tally()
    http = httpx.Client(timeout=TIMEOUT, limits=httpx.Limits(max_connections=concurrency + 2))
    pending: list[dict[str, Any]] = []

    def flush() -> None:
        if pending and not send_batch(http, server, pending, tally) and server.owned:
            server.relaunch()
        pending.clear()

    @settings(
        max_examples=count,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(live_requests())
    def one(body: dict[str, Any]) -> None:
        if tally.crashes and not server.owned and not server.alive():
            return  # someone else's server, dead: nothing more to learn
        if any(body.get("rid") == other.get("rid") for other in pending if "rid" in body):
            # SGLang refuses a rid already in flight ("Duplicate request ID detected"), and an
            # abort of one aborts every rid it is a prefix of: one batch, distinct rids.
            body = {**body, "rid": uuid.uuid4().hex}
        pending.append(body)
        if len(pending) >= concurrency:
            flush()

    try:
        (one if seed_value is None else seed(seed_value)(one))()
        flush()
    finally:
        http.close()
    return tally


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--url", help="a running server (default: start one)")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--concurrency", type=int, default=1, help="bodies sent at once")
    parser.add_argument("--kind", default="default", choices=sorted(KIND_FLAGS))
    parser.add_argument("--refusals", action="store_true", help="list SGLang's refusals")
    parser.add_argument("--crashes", type=Path, help="write the crashing bodies here (JSON)")
    args = parser.parse_args(argv)
    server = attach("fuzz", args.url) if args.url else start_server(args.kind)
    try:
        tally = fuzz(server, args.count, seed_value=args.seed, concurrency=args.concurrency)
    finally:
        server.stop()
    print(tally.summary())
    if args.refusals:
        for words, count in tally.refusals.most_common():
            print(f"{count:6d}  {words}")
        for wire in tally.server_errors:
            print(f"5xx for: {wire}")
        for line in tally.unanswered:
            print(f"no answer: {line}")
    if args.crashes is not None:
        args.crashes.write_text(json.dumps([vars(crash) for crash in tally.crashes], indent=1))
    for crash in tally.crashes:
        print(f"crash: {json.dumps(crash.bodies)}\n{crash.log_tail}\n", file=sys.stderr)
    return 1 if tally.crashes else 0


if __name__ == "__main__":
    sys.exit(main())
