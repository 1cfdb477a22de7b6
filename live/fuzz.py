"""The live fuzz: random bodies the library accepts, sent to a real SGLang server.

Each body is drawn from the project's own Hypothesis strategies
(`tests/strategies.py`, `client_requests`), kept inside what a tiny model can
serve (ids in [3, 320), few new tokens, `logprob_start_len` inside the prompt),
then taken through `decode_client_request`, `to_worker_envelope` and
`build_engine_request`; what the library builds is posted. Every body must get
an answer (any status) and the server must stay alive.

    python live/fuzz.py --count 10000 [--url URL] [--seed N] [--crashes FILE]

Without `--url` it starts its own default server (and starts it again after a
crash). It prints one line: bodies sent, statuses seen, crashes.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the repository's root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from live.servers import LiveServer, attach, relaunch, start_server
from sglang_envelope import (
    EnvelopeError,
    Role,
    build_engine_request,
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
    return body


@dataclass
class Crash:
    body: dict[str, Any]
    engine_body: str
    log_tail: str


@dataclass
class Tally:
    sent: int = 0
    refused_by_library: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    crashes: list[Crash] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    refusals: Counter[str] = field(default_factory=Counter)

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
        engine = build_engine_request(envelope, input_ids=request.input_ids, role=Role.AGGREGATED)
    except EnvelopeError:
        return None
    return engine.to_json()


def refusal(data: bytes) -> str:
    """The words of SGLang's refusal in an answer's body (an error body or error frame), digits
    and quoted values dropped so that one kind of refusal reads the same each time."""
    start = data.find(b'{"error"')
    if start < 0:
        start = data.find(b'{"object":"error"')
    if start < 0:
        return ""
    end = data.find(b"\n", start)
    try:
        error = json.loads(data[start : len(data) if end < 0 else end])
    except ValueError:
        return "(unreadable)"
    inner = error.get("error", error)
    message = str(inner.get("message", inner) if isinstance(inner, dict) else inner)
    message = re.sub(r"session id .* does not exist", "session id _ does not exist", message)
    return re.sub(r"'[^']*'|\d+(\.\d+)?", "_", message)[:110]


def post(http: httpx.Client, url: str, body: bytes) -> tuple[str, str]:
    """The answer's status (`/sse`, `/sse-error` for a stream, with an error frame), and its
    refusal's words."""
    headers = {"Content-Type": "application/json"}
    with http.stream("POST", f"{url}/generate", content=body, headers=headers) as answer:
        data = answer.read()
    status = str(answer.status_code)
    if answer.headers.get("content-type", "").startswith("text/event-stream"):
        status += "/sse-error" if b'data: {"error"' in data else "/sse"
    return status, refusal(data)


def send_one(http: httpx.Client, server: LiveServer, body: dict[str, Any], tally: Tally) -> bool:
    """Send one body; False when the server died of it (recorded in `tally`)."""
    wire = engine_body(body)
    if wire is None:
        tally.refused_by_library += 1
        return True
    tally.sent += 1
    try:
        status, words = post(http, server.url, wire)
        tally.statuses[status] += 1
        if words:
            tally.refusals[f"{status}: {words}"] += 1
    except httpx.HTTPError as error:
        tally.errors[type(error).__name__] += 1
    if server.alive():
        return True
    time.sleep(1.0)  # let the dying processes write their tracebacks
    tally.crashes.append(Crash(body, wire.decode(), server.tail(60)))
    return False


def fuzz(server: LiveServer, count: int, *, seed_value: int | None = None) -> Tally:
    """Send `count` drawn bodies to `server`; after a crash, start it again if it is ours."""
    tally = Tally()
    http = httpx.Client(timeout=TIMEOUT)

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
        if not send_one(http, server, body, tally) and server.owned:
            relaunch(server)

    try:
        (one if seed_value is None else seed(seed_value)(one))()
    finally:
        http.close()
    return tally


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--url", help="a running server (default: start one)")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--refusals", action="store_true", help="list SGLang's refusals")
    parser.add_argument("--crashes", type=Path, help="write the crashing bodies here (JSON)")
    args = parser.parse_args(argv)
    server = attach("fuzz", args.url) if args.url else start_server("default")
    try:
        tally = fuzz(server, args.count, seed_value=args.seed)
    finally:
        server.stop()
    print(tally.summary())
    if args.refusals:
        for words, count in tally.refusals.most_common():
            print(f"{count:6d}  {words}")
    if args.crashes is not None:
        args.crashes.write_text(json.dumps([vars(crash) for crash in tally.crashes], indent=1))
    for crash in tally.crashes:
        print(f"crash: {json.dumps(crash.body)}\n{crash.log_tail}\n", file=sys.stderr)
    return 1 if tally.crashes else 0


if __name__ == "__main__":
    sys.exit(main())
