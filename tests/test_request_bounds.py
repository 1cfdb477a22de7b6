"""The request side's costs and verdicts are bounded by the body, whatever form it takes."""

from __future__ import annotations

import tracemalloc

import pytest

from sglang_envelope import RequestRejected, decode_client_request


def _peak_over_body(body: bytes) -> float:
    """The most memory refusing `body` held at once, as a multiple of its size."""
    tracemalloc.start()
    try:
        with pytest.raises(RequestRejected) as caught:
            decode_client_request(body, max_body_bytes=len(body))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert caught.value.code == "unknown_field"
    return peak / len(body)


def test_a_long_unknown_key_costs_a_few_times_its_size() -> None:
    # (Counted by tracemalloc, not timed: "did you mean" over the whole key held 38x.)
    key = b"a" * (4 << 20)
    assert _peak_over_body(b'{"input_ids": [1], "' + key + b'": 1}') < 6


@pytest.mark.parametrize(
    ("key", "near"),
    [
        ("temperature", "sampling_params.temperature"),
        ("input_idz", "input_ids"),
        ("return_flat_raw_output_top_logprobs" + "x" * 46, "return_flat_raw_output_top_logprobs"),
        ("return_flat_raw_output_top_logprobs" + "x" * 47, None),  # too long to match any
    ],
)
def test_did_you_mean_still_finds_a_near_field(key: str, near: str | None) -> None:
    with pytest.raises(RequestRejected) as caught:
        decode_client_request({"input_ids": [1], key: 1})
    message = caught.value.message
    assert message.endswith(f"; did you mean `{near}`?" if near else "has no such field")
