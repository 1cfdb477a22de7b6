"""What SGLang's frames carry as deltas, and typed views that read a middle frame cheaply.

An incremental stream sends the fields of `DELTA_FIELDS` as deltas. A frame
that SGLang marks as a middle one (its bytes hold ``"finish_reason":null``)
can be read through a typed view that builds less than the full decoder
does, with the full decoder's verdict:

* the incremental view declares every key SGLang writes and refuses any
  other, so msgspec checks every byte, building structs instead of dicts;
* the cumulative view reads only the finish reason, error and index and skips
  the rest unchecked, so it is trusted only for bytes `plain` passes.

`intermediate_view` gives a view, or None when the frame must be decoded in
full (it may be the terminal one, or the view cannot read it).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final, cast

import msgspec
from msgspec import UNSET, UnsetType

from sglang_envelope._sse import Payload

__all__ = [
    "CUMULATIVE_VIEW",
    "DELTA_FIELDS",
    "DELTA_ROWS",
    "INCREMENTAL_VIEW",
    "JSON_TYPE_NAMES",
    "NOT_TERMINAL",
    "intermediate_view",
    "plain",
    "same_json",
    "searchable",
]

DELTA_FIELDS: Final[tuple[tuple[str, type], ...]] = (
    ("text", str),
    ("output_ids", list),
    ("meta_info.output_token_logprobs", list),
    ("meta_info.output_top_logprobs", list),
    ("meta_info.output_token_ids_logprobs", list),
    ("meta_info.output_token_sampling_mask", list),
    ("meta_info.output_token_sampling_logprobs", list),
)
"""The fields an incremental stream sends as deltas, with their JSON type.

Aggregation concatenates these in frame order; a field that any frame carries
is in the result. Every other field, including the ``input_*`` keys,
``output_token_logprobs_length``, ``completion_tokens``, ``finish_reason`` and
unknown keys, takes the terminal frame's value. This mirrors SGLang's
``_INCREMENTAL_STREAMING_META_INFO_KEYS`` and its ``text``/``output_ids``
deltas, and the way its ``_coalesce_streaming_chunks`` merges queued chunks.
"""

# (dotted path, key in its parent, parent is meta_info, JSON type)
DELTA_ROWS: Final = tuple(
    (path, path.rpartition(".")[2], "." in path, kind) for path, kind in DELTA_FIELDS
)
JSON_TYPE_NAMES: Final[dict[type, str]] = {str: "a string", list: "an array"}

# Typed views of an intermediate frame, built from DELTA_FIELDS.
#
# An incremental view declares every key SGLang writes in a frame and refuses
# any other (forbid_unknown_fields), so msgspec checks every byte exactly as
# the full decoder does, while building structs instead of dicts and keeping
# the delta lists; a frame with another key is decoded in full instead.
#
# A cumulative view reads only the finish reason, error and index: msgspec
# skips every other field without building it, but also without checking its
# UTF-8 or the range of its numbers, so it is trusted only for bytes `plain`
# passes. gc=False: views are transient and hold no cycles.
_SGLANG_META_KEYS: Final = (
    # tokenizer_manager._handle_batch_output and add_logprob_to_meta_info
    "id",
    "prompt_tokens",
    "weight_version",
    "num_retractions",
    "reasoning_tokens",
    "completion_tokens",
    "cached_tokens",
    "cached_tokens_details",
    "e2e_latency",
    "queue_time",
    "dp_rank",
    "input_token_logprobs",
    "input_top_logprobs",
    "input_token_ids_logprobs",
    "output_token_logprobs_length",
    "output_token_sampling_mask_length",
)
_SGLANG_TOP_KEYS: Final = ("prompt_token_ids",)


def _view(name: str, fields: list[tuple[str, Any, Any]], *, strict: bool) -> Any:
    return msgspec.defstruct(name, fields, gc=False, forbid_unknown_fields=strict)


def _delta_fields(in_meta: bool) -> list[tuple[str, Any, Any]]:
    return [
        (key, (str if kind is str else list[Any]) | UnsetType, UNSET)
        for _, key, meta, kind in DELTA_ROWS
        if meta is in_meta
    ]


def _other_fields(keys: tuple[str, ...]) -> list[tuple[str, Any, Any]]:
    return [(key, Any, UNSET) for key in keys]


_FINISH: Final = ("finish_reason", dict[str, Any] | None, None)
_COMMON: Final = [("error", Any, None), ("object", Any, None), ("index", Any, UNSET)]
_IncrementalMeta = _view(
    "_IncrementalMeta",
    [_FINISH, *_delta_fields(True), *_other_fields(_SGLANG_META_KEYS)],
    strict=True,
)
_IncrementalFrame = _view(
    "_IncrementalFrame",
    [
        *_COMMON,
        ("meta_info", _IncrementalMeta | UnsetType, UNSET),
        *_delta_fields(False),
        *_other_fields(_SGLANG_TOP_KEYS),
    ],
    strict=True,
)
_CumulativeMeta = _view("_CumulativeMeta", [_FINISH], strict=False)
_CumulativeFrame = _view(
    "_CumulativeFrame",
    [*_COMMON, ("meta_info", _CumulativeMeta | UnsetType, UNSET)],
    strict=False,
)
INCREMENTAL_VIEW: Final = msgspec.json.Decoder(_IncrementalFrame)
CUMULATIVE_VIEW: Final = msgspec.json.Decoder(_CumulativeFrame)
NOT_TERMINAL: Final = b'"finish_reason":null'  # as SGLang writes an intermediate frame
# Digits become 0, "E" becomes "e" and "+" becomes "-", so that two searches
# find every number msgspec's full decoder could refuse: an exponent of three
# digits or more, or a run of 200 digits (an integer over 4,300 digits, or a
# float past 1.8e308 without such an exponent). The regular expression, with
# its literal first byte, scans faster than a substring search for "0e000".
_NUMBER_SHAPES: Final = bytes.maketrans(b"123456789E+", b"000000000e-")
_BIG_EXPONENT: Final = re.compile(rb"e-?000")
_LONG_DIGITS: Final = b"0" * 200


def plain(data: bytes | bytearray) -> bool:
    """True when the full JSON decoder accepts whatever a typed view skipped in `data`.

    A skipped field is not checked for valid UTF-8 or for numbers out of range;
    anything else a view accepts, the full decoder accepts too. False may be
    a false alarm: the caller then decodes in full.
    """
    if not data.isascii():
        try:
            data.decode()
        except UnicodeDecodeError:
            return False
    shapes = data.translate(_NUMBER_SHAPES)
    return _LONG_DIGITS not in shapes and _BIG_EXPONENT.search(shapes) is None


def intermediate_view(decode: Callable[[Payload], Any], payload: Payload, index: Any) -> Any:
    """An intermediate frame read through a typed view, or None to decode it in full and `add` it.

    None when the bytes lack SGLang's ``"finish_reason":null`` (the frame may
    be the terminal one), when the view cannot read them (an unknown key, a
    wrong type), and for a frame with an error, no meta_info, a finish reason
    or another index than the first frame's.
    """
    if NOT_TERMINAL not in searchable(payload):
        return None
    try:
        view = decode(payload)
    except (msgspec.DecodeError, RecursionError):
        return None
    if (
        view.error is not None
        or view.object is not None
        or view.meta_info is UNSET
        or view.meta_info.finish_reason is not None
        or not (view.index is index or same_json(view.index, index))
    ):
        return None
    return view


def searchable(payload: Payload) -> bytes | bytearray:
    """Bytes to search in place of `payload`, without a copy.

    A memoryview payload (`SseDecoder` keeps a one-line event's data so) is a
    slice of its line, which adds only ``data:`` and a space: the same search
    and the same `plain` verdict.
    """
    if type(payload) is memoryview:
        return cast("bytes | bytearray", payload.obj)
    return payload


def same_json(a: object, b: object) -> bool:
    """`a == b` for decoded JSON, where nesting too deep to compare counts as different."""
    try:
        return a == b
    except RecursionError:
        return False
