"""The short live fuzz: 200 bodies the library accepts, each answered, the server alive after.

The suite draws the same 200 bodies every run (`SEED`; `LIVE_FUZZ_SEED` picks others, 0 a
random draw), so that it passes or fails on the library's change alone. Finding new
bodies is the long run's job: `python live/fuzz.py --count 10000` (a random seed).
"""

from __future__ import annotations

import json
import os

from live.fuzz import fuzz
from live.servers import LiveServer

COUNT = int(os.environ.get("LIVE_FUZZ_COUNT", "200"))
#: The suite's draw.
SEED = 20261203
#: Bodies sent at once: the server's `--max-running-requests`, so that SGLang batches them.
CONCURRENCY = 4


def test_every_accepted_body_is_answered_and_the_server_lives(server: LiveServer) -> None:
    seed = int(os.environ.get("LIVE_FUZZ_SEED", str(SEED))) or None
    tally = fuzz(server, COUNT, seed_value=seed, concurrency=CONCURRENCY)
    crashes = "\n\n".join(f"{json.dumps(c.bodies)}\n{c.log_tail}" for c in tally.crashes)
    assert not tally.crashes, f"{tally.summary()}\n{crashes}"
    unanswered = "\n".join(tally.unanswered)
    assert not tally.errors, f"{tally.summary()}; bodies without an answer:\n{unanswered}"
    assert tally.sent + tally.refused_by_library == COUNT
    assert sum(tally.statuses.values()) == tally.sent
    assert server.alive()
