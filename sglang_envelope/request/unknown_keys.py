"""A key no typed field holds, refused in the target's words (a "did you mean" hint
bounded by the key's size).

`decode_errors.first_unknown_key` finds the key in the body; `refuse_unknown`
words its refusal for one target's contract.
"""

from __future__ import annotations

import difflib

from sglang_envelope.errors.exceptions import RequestRejected
from sglang_envelope.request.contract import Contract
from sglang_envelope.request.owners import FIELD_OWNERS
from sglang_envelope.request.rules import reject

__all__ = ["refuse_unknown", "unknown_sampling_key", "unknown_top_level_key"]


def refuse_unknown(contract: Contract, path: str, key: str) -> RequestRejected:
    """The refusal of `key`, unknown at `path` ("": the top level)
    of a body for `contract`."""
    if path == "sampling_params":
        return unknown_sampling_key(key, contract)
    if not path:
        return unknown_top_level_key(key, contract)
    return reject("unknown_nested_field", key=key, path=path)


def _close_field(key: str, fields: tuple[str, ...]) -> str | None:
    """The known field nearest `key`, as `difflib.get_close_matches` finds it, or None.

    difflib indexes every character of `key`, so a long key would cost many times its
    size; at its cutoff of 0.6 a key longer than 7/3 of the longest field can match none
    (the ratio is at most 2 * len(field) / (len(key) + len(field))), so such a key is
    not read at all.
    """
    if 3 * len(key) > 7 * max(map(len, fields), default=0):
        return None
    near = difflib.get_close_matches(key, fields, n=1, cutoff=0.6)
    return near[0] if near else None


def unknown_top_level_key(key: str, contract: Contract) -> RequestRejected:
    """The refusal of a top-level key no typed field holds, in the target's words."""
    owner = FIELD_OWNERS.get(key)
    if owner is not None:
        return reject(owner, key=key)
    fields = contract.target.tables.generate_req_input_fields
    if key in contract.sampling_keys and key not in contract.fields:
        hint = f"; did you mean `sampling_params.{key}`?"
    else:
        near = _close_field(key, fields)
        hint = f"; did you mean `{near}`?" if near else ""
    return reject("unknown_field", key=key, hint=hint, release=contract.release)


def unknown_sampling_key(key: str, contract: Contract) -> RequestRejected:
    """The refusal of a `sampling_params` key: the gate's words, or `SamplingParams`'."""
    code, facts = contract.unknown_sampling
    return reject(code, key=key, **facts)
