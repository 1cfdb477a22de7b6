"""The live fuzz on a prefill/decode pair: both legs of each body, as the library builds them.

Each body drawn by `fuzz.live_requests` becomes a prefill and a decode engine request
with one `Bootstrap`, sent to the pair at once and both read to the end. Each leg
must get an answer (any status) and both servers must stay alive.

    python live/fuzz_pd.py --count 500 [--seed N] [--lone-leg-timeout S]

It starts its own pair (and starts it again after a crash) and prints one line:
bodies sent, the pairs of statuses seen, crashes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the repository's root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
from hypothesis import HealthCheck, Phase, given, seed, settings

from live.flow import engine_request
from live.fuzz import TIMEOUT, Crash, Tally, live_requests, post
from live.pd import PdPair, start_pd_pair
from sglang_envelope import (
    Bootstrap,
    EnvelopeError,
    Role,
    decode_client_request,
    to_worker_envelope,
)


def legs(body: dict[str, Any], pair: PdPair) -> tuple[bytes, bytes] | None:
    """The prefill and decode engine bodies for `body`, or None when the library refuses it."""
    try:
        request = decode_client_request(json.dumps(body).encode())
        envelope = to_worker_envelope(request, rid=uuid.uuid4().hex)
        meeting = Bootstrap(pair.bootstrap_host, pair.bootstrap_port, uuid.uuid4().int >> 65)
        prefill, decode = (
            engine_request(envelope, role=r, bootstrap=meeting) for r in (Role.PREFILL, Role.DECODE)
        )
    except EnvelopeError:
        return None
    return prefill.to_json(), decode.to_json()


def _post(http: httpx.Client, url: str, wire: bytes) -> tuple[str, str]:
    try:
        return post(http, url, wire)
    except httpx.HTTPError as error:
        return type(error).__name__, ""


def send_pair(http: httpx.Client, pair: PdPair, body: dict[str, Any], tally: Tally) -> bool:
    """Send both legs of `body` at once; False when a server died (recorded in `tally`)."""
    wires = legs(body, pair)
    if wires is None:
        tally.refused_by_library += 1
        return True
    tally.sent += 1
    urls = (pair.prefill_url, pair.decode_url)
    with ThreadPoolExecutor(2) as pool:
        (prefill, p_words), (decode, d_words) = pool.map(_post, [http] * 2, urls, wires)
    tally.statuses[f"prefill {prefill}, decode {decode}"] += 1
    for leg, words in (("prefill", p_words), ("decode", d_words)):
        if words:
            tally.refusals[f"{leg} {prefill if leg == 'prefill' else decode}: {words}"] += 1
    if pair.alive():
        return True
    time.sleep(1.0)  # let the dying processes write their tracebacks
    tails = f"prefill:\n{pair.prefill.tail(40)}\ndecode:\n{pair.decode.tail(40)}"
    tally.crashes.append(Crash([body], [w.decode() for w in wires], tails))
    return False


def fuzz_pd(pair: PdPair, count: int, *, seed_value: int | None = None) -> Tally:
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
        if not send_pair(http, pair, body, tally):
            pair.relaunch()

    try:
        (one if seed_value is None else seed(seed_value)(one))()
    finally:
        http.close()
    return tally


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=500)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--lone-leg-timeout", type=int, default=30, help="seconds")
    parser.add_argument("--crashes", type=Path, help="write the crashing bodies here (JSON)")
    args = parser.parse_args(argv)
    pair = start_pd_pair(lone_leg_timeout_s=args.lone_leg_timeout)
    try:
        tally = fuzz_pd(pair, args.count, seed_value=args.seed)
    finally:
        pair.stop()
    print(tally.summary().replace("live fuzz", "live PD fuzz"))
    for words, count in Counter(tally.refusals).most_common():
        print(f"{count:6d}  {words}")
    for status, count in tally.statuses.most_common():
        print(f"{count:6d}  {status}")
    if args.crashes is not None:
        args.crashes.write_text(json.dumps([vars(crash) for crash in tally.crashes], indent=1))
    for crash in tally.crashes:
        print(f"crash: {json.dumps(crash.bodies)}\n{crash.log_tail}\n", file=sys.stderr)
    return 1 if tally.crashes else 0


if __name__ == "__main__":
    sys.exit(main())
