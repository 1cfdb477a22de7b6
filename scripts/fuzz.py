"""The long fuzz run: each entry point's hostile-input property tests, many examples each.

    python scripts/fuzz.py [--examples N] [--jobs J]

Runs the Hypothesis tests in FUZZ_TESTS under the `fuzz` profile with
`max_examples` N each (default 33,000), split over J pytest processes, and
prints each test's passing and failing examples and their totals. Each of
these tests feeds one public entry point (or two that must agree) damaged,
random or hostile input and fails on any exception that is not the library's
own, or on a verdict that differs between the two paths. Exits 1 when a test
fails. Run from the repository root with the test dependencies installed.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: (test file, test name): the Hypothesis tests of the long run, by entry point.
FUZZ_TESTS: tuple[tuple[str, str], ...] = (
    # decode_client_request, decode_envelope, to_worker_envelope, build_engine_request
    ("test_hostile.py", "test_damaged_requests_and_envelopes"),
    ("test_hostile.py", "test_request_mappings_with_hostile_values"),
    ("test_hostile.py", "test_build_engine_request_with_hostile_values"),
    ("test_request_hostile.py", "test_random_bytes"),
    ("test_request_hostile.py", "test_any_json_value"),
    ("test_request_hostile.py", "test_any_value_in_any_field"),
    ("test_request_trust.py", "test_structs_built_by_hand_never_get_past_the_rules"),
    ("test_target.py", "test_any_values_make_a_target_or_an_envelope_error"),
    # SseDecoder
    ("test_sse.py", "test_random_bytes_raise_only_envelope_errors"),
    ("test_sse.py", "test_mutated_transcripts_raise_only_envelope_errors"),
    ("test_hostile.py", "test_hostile_events_in_any_chunks"),
    # StreamAggregator, aggregate_frames, aggregate_sse, parse_unary and their twins
    ("test_aggregate.py", "test_aggregate_sse_on_hostile_events"),
    ("test_aggregate.py", "test_aggregate_sse_on_random_bytes"),
    ("test_aggregate.py", "test_aggregate_frames_on_any_json"),
    ("test_aggregate.py", "test_aggregation_of_retyped_frames"),
    ("test_aggregate.py", "test_parse_unary_on_hostile_bodies"),
    ("test_hostile.py", "test_damaged_sglang_answers"),
    ("test_hostile.py", "test_frames_with_hostile_values"),
    ("test_stream_verdicts.py", "test_the_fast_path_refuses_what_the_frame_decoder_refuses"),
    ("test_stream_verdicts.py", "test_the_first_fault_wins_whatever_the_chunking"),
    ("test_aggregate_bytes.py", "test_the_same_verdicts_as_aggregate_sse"),
    ("test_aggregate_bytes.py", "test_any_stream_in_a_forced_mode"),
    ("test_async.py", "test_the_async_twin_gives_the_same_verdict"),
    # relay_sse
    ("test_relay.py", "test_damaged_streams_get_aggregations_verdict"),
    # merge_prefill, finalize_response, error_response
    ("test_merge.py", "test_any_json_raises_only_envelope_errors"),
    ("test_finalize.py", "test_any_json_raises_only_response_errors"),
    ("test_errors.py", "test_any_fields_give_json"),
    # the flat top-logprob codec
    ("test_flat.py", "test_hostile_meta_info_raises_only_envelope_errors"),
    ("test_flat.py", "test_hostile_nested_raises_only_envelope_errors"),
    ("test_flat.py", "test_decode_reads_fields_built_without_the_library"),
    ("test_hostile.py", "test_flat_fields_with_hostile_values"),
    # the command line
    ("test_hostile.py", "test_cli_on_hostile_bytes"),
)

_TEST = re.compile(r"^(tests/\S+::\S+):$")
_COUNTS = re.compile(r"- ([\d,]+) passing, ([\d,]+) failing")


def node_ids() -> list[str]:
    return [f"tests/{file}::{name}" for file, name in FUZZ_TESTS]


def counts(output: str) -> dict[str, tuple[int, int]]:
    """Passing and failing examples per test, summed over Hypothesis' phases."""
    found: dict[str, tuple[int, int]] = {}
    test = None
    for line in output.splitlines():
        if match := _TEST.match(line.strip()):
            test = match.group(1)
        elif test and (match := _COUNTS.search(line)):
            passing, failing = (int(group.replace(",", "")) for group in match.groups())
            before = found.get(test, (0, 0))
            found[test] = (before[0] + passing, before[1] + failing)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=33_000, help="max_examples a test")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="pytest processes")
    args = parser.parse_args()
    env = {
        **os.environ,
        "SGLANG_ENVELOPE_HYPOTHESIS_PROFILE": "fuzz",
        "SGLANG_ENVELOPE_FUZZ_EXAMPLES": str(args.examples),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    ids = node_ids()
    shards = [ids[i :: args.jobs] for i in range(args.jobs) if ids[i :: args.jobs]]
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"]
    command += ["--hypothesis-show-statistics", "-o", "addopts="]
    start = time.monotonic()
    runs = [
        subprocess.Popen([*command, *shard], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
        for shard in shards
    ]
    outputs = [run.communicate()[0] for run in runs]
    found: dict[str, tuple[int, int]] = {}
    for output in outputs:
        found.update(counts(output))
    for test in ids:
        passing, failing = found.get(test, (0, 0))
        print(f"{passing:>9,} passing {failing:>5,} failing  {test}")
    total_passing = sum(p for p, _ in found.values())
    total_failing = sum(f for _, f in found.values())
    minutes = (time.monotonic() - start) / 60
    print(f"{total_passing:>9,} passing {total_failing:>5,} failing  in all ({minutes:.1f} min)")
    failed = any(run.returncode != 0 for run in runs) or total_failing > 0
    if failed:
        for output in outputs:
            tail = output[output.find("FAILURES") :] if "FAILURES" in output else ""
            print(tail[:20_000])
    missing = [test for test in ids if test not in found]
    if missing:
        print(f"no statistics for: {', '.join(missing)}")
    return 1 if failed or missing else 0


if __name__ == "__main__":
    raise SystemExit(main())
