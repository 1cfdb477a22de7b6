"""Another release, live: SGLang 0.5.22's own code serving, the library built for its `Target`.

`live/setup.sh` installs 0.5.22's code beside 0.5.23 (`pip install --no-deps --target`);
put first on the path it runs a whole server on 0.5.23's dependencies. The library's
engine requests for `Target(sglang="0.5.22")` must be accepted, and the client's answer
must be the one 0.5.22 gives directly.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from live.flow import (
    assert_same,
    body_of,
    final_state,
    library_and_direct,
)
from live.servers import LiveServer
from sglang_envelope import Target

TARGET = Target(sglang="0.5.22")
PROMPT = [5, 6, 7, 9, 10, 11, 12, 13]
GREEDY = {"temperature": 0, "max_new_tokens": 10}
BODIES: dict[str, dict[str, Any]] = {
    "plain_unary": {"input_ids": PROMPT, "sampling_params": GREEDY, "stream": False},
    "plain_stream": {"input_ids": PROMPT, "sampling_params": GREEDY, "stream": True},
    "logprobs_stream": {
        "input_ids": PROMPT,
        "sampling_params": GREEDY,
        "stream": True,
        "return_logprob": True,
        "top_logprobs_num": 2,
        "logprob_start_len": 3,
    },
    "output_flat_b64": {
        "input_ids": PROMPT,
        "sampling_params": GREEDY,
        "return_logprob": True,
        "top_logprobs_num": 2,
        "return_flat_raw_output_top_logprobs": True,
        "return_flat_raw_top_logprobs_b64": True,
    },
}


def test_the_server_runs_0_5_22(release_server: LiveServer) -> None:
    assert json.loads(release_server.server_info)["version"] == "0.5.22"


@pytest.mark.parametrize("name", list(BODIES))
def test_answers_through_the_0_5_22_target(release_server: LiveServer, name: str) -> None:
    got, want = asyncio.run(library_and_direct(release_server.url, body_of(BODIES[name]), TARGET))
    assert want.status == got.status == 200
    if BODIES[name].get("stream"):
        assert_same(
            final_state(got.frames(), incremental=False),
            final_state(want.frames(), incremental=False),
        )
    else:
        assert_same(got.json(), want.json())
