"""The rule check the library compiles for each target shows its source in tracebacks."""

from __future__ import annotations

import inspect
import linecache
import traceback

import pytest

from sglang_envelope import RequestRejected, Target, decode_client_request
from sglang_envelope.request.contract import contract_for


@pytest.mark.parametrize("target", [Target(), Target(sglang="0.5.23", transport="engine")])
def test_the_compiled_check_is_in_linecache(target: Target) -> None:
    check = contract_for(target).check
    filename = check.__code__.co_filename
    assert filename.startswith(f"<sglang_envelope rules check {target.sglang} {target.transport} ")
    assert filename in linecache.cache
    assert linecache.getline(filename, 1) == "def check(v, limits):\n"
    assert inspect.getsource(check).startswith("def check(v, limits):\n")
    linecache.checkcache()  # no file behind it: kept, not dropped
    assert linecache.getline(filename, 1) == "def check(v, limits):\n"


def test_a_refusal_raised_in_the_check_shows_its_line() -> None:
    with pytest.raises(RequestRejected) as caught:
        decode_client_request(b'{"input_ids": [1], "sampling_params": {"temperature": -1}}')
    frames = traceback.extract_tb(caught.value.__traceback__)
    last = frames[-1]  # where the refusal is raised: a line of the generated check
    assert last.filename.startswith("<sglang_envelope rules check 0.5.23 http ")
    assert last.line is not None and last.line.startswith("raise _rejected(e")
