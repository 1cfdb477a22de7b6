"""`normalize --sglang --transport --unknown-fields`: the engine request for one target."""

from __future__ import annotations

from tests.test_cli import run

OUTPUT_FLAT = (
    b'{"input_ids": [1, 2], "return_flat_raw_output_top_logprobs": true,'
    b' "sampling_params": {"ebnf_full_assistant": true}}'
)


def test_normalize_for_an_in_process_0_5_22_worker() -> None:
    code, out, _ = run(
        "normalize", "--vocab-size", "151936", "--role", "aggregated",
        "--sglang", "0.5.22", "--transport", "engine", stdin=OUTPUT_FLAT,
    )  # fmt: skip
    assert code == 0
    assert out["body"]["sampling_params"] == {"ebnf_full_assistant": True}
    assert out["body"]["return_flat_raw_output_top_logprobs"] is True


def test_normalize_refuses_what_the_release_lacks() -> None:
    code, out, _ = run(
        "normalize", "--vocab-size", "151936", "--role", "aggregated",
        "--sglang", "0.5.21", "--transport", "engine", stdin=OUTPUT_FLAT,
    )  # fmt: skip
    assert code == 2
    assert out["error"]["code"] == "needs_newer_sglang"
    assert out["error"]["message"] == (
        "return_flat_raw_output_top_logprobs needs SGLang 0.5.22 or later; this target is 0.5.21"
    )


def test_normalize_passes_unknown_keys_when_asked() -> None:
    body = b'{"input_ids": [1], "new_thing": 1}'
    code, out, _ = run(
        "normalize",
        "--vocab-size",
        "151936",
        "--role",
        "aggregated",
        "--unknown-fields",
        "pass",
        stdin=body,
    )
    assert (code, out["body"]["new_thing"]) == (0, 1)
    code, out, _ = run("normalize", "--vocab-size", "151936", "--role", "aggregated", stdin=body)
    assert (code, out["error"]["code"]) == (2, "unknown_field")
