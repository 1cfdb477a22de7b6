"""What SGLang's frames carry as deltas, and typed views that read a middle frame cheaply.

An incremental stream sends the fields of `DELTA_FIELDS` as deltas. A frame
that SGLang marks as a middle one (its bytes hold ``"finish_reason":null``)
can be read through a typed view that builds less than the full decoder does,
with the full decoder's verdict: `MiddleReader` is the one reader of middle
frames. `unparsed_middles` is its verdict on bytes alone, for a relay that
passes middle frames on unparsed.
"""

from __future__ import annotations

import functools
import re
from itertools import repeat
from typing import Any, Final

import msgspec
from msgspec import UNSET, UnsetType

from sglang_envelope.response.sse import Payload

__all__ = [
    "COUNTED_BY",
    "DELTA_FIELDS",
    "DELTA_ROWS",
    "MiddleReader",
    "frame_fields",
    "one_line",
    "own_length",
    "same_json",
    "unparsed_middle",
    "unparsed_middles",
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

COUNTED_BY: Final[dict[str, str]] = {
    "output_ids": "completion_tokens",
    "meta_info.output_token_logprobs": "output_token_logprobs_length",
    "meta_info.output_top_logprobs": "output_token_logprobs_length",
    "meta_info.output_token_ids_logprobs": "output_token_logprobs_length",
    "meta_info.output_token_sampling_mask": "output_token_sampling_mask_length",
    "meta_info.output_token_sampling_logprobs": "output_token_sampling_mask_length",
}
"""The ``meta_info`` count of each delta list's entries: one per output token so far.

SGLang (0.5.21-0.5.23, ``tokenizer_manager._handle_batch_output``) puts the
request's growing lists into a cumulative middle frame, not copies ("pass
reference (no copy)"), and the frame is written when the server gets to it: its
lists may hold entries that a later frame counts. A frame's own entries are the
first `count` of each; the terminal frame carries copies, its counts exact.
"""


def own_length(count: object, length: int) -> int:
    """How many of the `length` entries a cumulative frame holds in a list are its own:
    the list's count (`COUNTED_BY`), when an integer within them, else all of them."""
    return count if type(count) is int and 0 <= count <= length else length


# (dotted path, key in its parent, parent is meta_info, JSON type)
DELTA_ROWS: Final = tuple(
    (path, path.rpartition(".")[2], "." in path, kind) for path, kind in DELTA_FIELDS
)

# Typed views of a middle frame, built from DELTA_FIELDS (see the module's
# docstring). A view decodes only what a middle frame may be: no error, no
# object, a meta_info object without a finish reason, and the first frame's
# index (none: no index at all; a view with an index leaves the comparison to
# `MiddleReader.read`). msgspec refuses anything else while decoding, and the
# frame is then decoded in full. gc=False: views are transient and hold no
# cycles.
_SGLANG_META_KEYS: Final = (
    # tokenizer_manager._handle_batch_output and add_logprob_to_meta_info, in the
    # order SGLang writes them (msgspec reads keys fastest in its fields' order)
    "id",
    "finish_reason",
    "prompt_tokens",
    "weight_version",
    "num_retractions",
    "reasoning_tokens",
    "completion_tokens",
    "cached_tokens",
    "cached_tokens_details",
    "output_token_logprobs",
    "output_top_logprobs",
    "output_token_ids_logprobs",
    "output_token_sampling_mask",
    "output_token_sampling_logprobs",
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

_Field = tuple[str, Any] | tuple[str, Any, Any]


def _view(
    name: str, fields: list[_Field], *, strict: bool, rename: dict[str, str] | None = None
) -> Any:
    return msgspec.defstruct(
        name,
        fields,
        rename=rename or None,
        gc=False,
        forbid_unknown_fields=strict,
        kw_only=True,
    )


def _delta_fields(in_meta: bool) -> list[_Field]:
    return [
        (key, (str if kind is str else list[Any]) | UnsetType, UNSET)
        for _, key, meta, kind in DELTA_ROWS
        if meta is in_meta
    ]


_MIDDLE: Final[list[_Field]] = [("error", None, None), ("object", None, None)]
_INDEX: Final[dict[bool, _Field]] = {
    False: ("index", UnsetType, UNSET),
    True: ("index", Any),
}
#: The top-level keys the incremental view declares (a stream's own learned besides).
_TOP_KEYS: Final = frozenset(
    [field[0] for field in (*_delta_fields(False), *_MIDDLE, _INDEX[True])]
    + ["meta_info", *_SGLANG_TOP_KEYS]
)
_CumulativeMeta = _view("_CumulativeMeta", [("finish_reason", None, None)], strict=False)


def _learned(keys: tuple[str, ...]) -> tuple[list[_Field], dict[str, str]]:
    """Fields of type Any for `keys`, under names of their own, and their renames."""
    names = [f"learned_{i}_" for i in range(len(keys))]
    return [(name, Any, UNSET) for name in names], dict(zip(names, keys, strict=True))


@functools.lru_cache(maxsize=32)
def _incremental(
    indexed: bool, top: tuple[str, ...] = (), meta: tuple[str, ...] = ()
) -> msgspec.json.Decoder[Any]:
    """The incremental view's decoder, declaring SGLang 0.5.23's keys and those a stream
    taught it (`top`, `meta`: `MiddleReader`); a few such sets are kept, since each
    costs about 0.4 ms to make."""
    # meta_info: no finish reason, the deltas typed, every other key any JSON.
    deltas = {field[0]: field for field in _delta_fields(True)}
    meta_fields: list[_Field] = [
        ("finish_reason", None, None)
        if key == "finish_reason"
        else deltas.get(key, (key, Any, UNSET))
        for key in _SGLANG_META_KEYS
    ]
    learned, meta_names = _learned(meta)
    meta_view = _view(
        "_IncrementalMeta", meta_fields + learned, strict=True, rename=meta_names
    )
    top_fields, top_names = _learned(top)
    fields = [*_delta_fields(False), ("meta_info", meta_view), *_MIDDLE, _INDEX[indexed]]
    fields += [(key, Any, UNSET) for key in _SGLANG_TOP_KEYS]
    frame_view = _view(
        "_IncrementalFrame", fields + top_fields, strict=True, rename=top_names
    )
    return msgspec.json.Decoder(frame_view)


@functools.lru_cache(maxsize=2)
def _cumulative(indexed: bool) -> msgspec.json.Decoder[Any]:
    fields = [("meta_info", _CumulativeMeta), *_MIDDLE, _INDEX[indexed]]
    return msgspec.json.Decoder(_view("_CumulativeFrame", fields, strict=False))


#: How many keys beyond SGLang 0.5.23's one stream's view may learn, and how long each.
MAX_LEARNED_KEYS: Final = 8
MAX_LEARNED_KEY_CHARS: Final = 64
_LEARNABLE: Final = re.compile(rf'[^\\"\x00-\x1f]{{1,{MAX_LEARNED_KEY_CHARS}}}')
#: A frame's keys, each value its JSON (`frame_fields`).
_RAW_MEMBERS: Final = msgspec.json.Decoder(dict[str, msgspec.Raw])
#: What a view raises for a frame that is not a middle frame it can read.
VIEW_ERRORS: Final = (msgspec.DecodeError, RecursionError)
NOT_TERMINAL: Final = b'"finish_reason":null'  # as SGLang writes an intermediate frame


class MiddleReader:
    """The one reader of a stream's middle frames, for a stream whose first frame had
    `index` and is read in one mode (`incremental`).

    `read` gives a middle frame through a typed view, with the full decoder's
    verdict, or None: the frame must then be decoded in full (it may be the
    terminal one, or the view cannot read it). The view refuses an error, an
    ``object``, a finish reason and, for an incremental stream, any key it does
    not declare; the index must be the first frame's; a cumulative frame's bytes
    must be `plain` (its view skips what it does not read).

    A middle frame (its bytes holding SGLang's ``"finish_reason":null``) with
    keys SGLang 0.5.23 does not write (a newer release, a server flag) teaches
    them to an incremental stream's view, which declares them as
    any JSON and so still checks every byte. A new key then
    costs a view made once, not the full decode of every frame. `learned`
    holds the keys, at most `MAX_LEARNED_KEYS` plain names of at most
    `MAX_LEARNED_KEY_CHARS`; a frame with others is left to the full decoder.
    """

    __slots__ = ("_decode", "_index", "_indexed", "incremental", "learned")

    def __init__(self, index: Any, *, incremental: bool = True) -> None:
        self._index = index
        self._indexed = index is not UNSET
        self.incremental = incremental
        self.learned: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
        self._decode = (_incremental if incremental else _cumulative)(
            self._indexed
        ).decode

    def read(self, payload: Payload) -> Any:
        """`payload` as a middle frame's view, or None to decode it in full
        (see the class)."""
        try:
            view = self._decode(payload)
        except msgspec.ValidationError:
            # The terminal frame, or a frame with keys the view does not declare: only a
            # middle frame (SGLang writes its null finish reason as NOT_TERMINAL) may
            # teach the view its keys.
            if (
                not self.incremental
                or payload.find(NOT_TERMINAL) < 0
                or not self._learn(payload)
            ):
                return None
            try:
                view = self._decode(payload)
            except VIEW_ERRORS:
                return None
        except VIEW_ERRORS:
            return None
        index = self._index
        if index is not UNSET and not (
            view.index is index or same_json(view.index, index)
        ):
            return None
        if not self.incremental and not plain(payload):
            return None
        return view

    def _learn(self, payload: Payload) -> bool:
        """Add `payload`'s undeclared keys to the view; False when there are none."""
        fields = frame_fields(payload)
        if fields is None:
            return False
        top, meta = self.learned
        new_top = tuple(sorted(set(fields).difference(_TOP_KEYS, top)))
        new_meta = tuple(
            sorted(set(fields["meta_info"]).difference(_SGLANG_META_KEYS, meta))
        )
        new = new_top + new_meta
        if not new or len(top) + len(meta) + len(new) > MAX_LEARNED_KEYS:
            return False
        if not all(_LEARNABLE.fullmatch(key) for key in new):
            return False
        self.learned = (top + new_top, meta + new_meta)
        self._decode = _incremental(self._indexed, *self.learned).decode
        return True


def unparsed_middles(events: list[bytes], data: bytes, start: int = 0) -> bool:
    """Whether each of `events` (the event lines of `data` from `start`, or `data`) is a
    middle frame by its bytes alone, so that it may go out unparsed.

    `data` from `start` holds exactly as many ``"finish_reason"`` as there are
    events and each event holds one ``"finish_reason":null``, so that is each
    event's one finish_reason key; and no key can be spelt another way, as
    `data` has no ``\\u00`` escape (the backslash is looked for first: most
    frames have none).
    """
    return (
        data.count(_FINISH_KEY, start) == len(events)
        and min(map(bytes.find, events, repeat(NOT_TERMINAL))) >= 0
        and (b"\\" not in data or _ESCAPE not in data)
    )


def unparsed_middle(payload: Payload) -> bool:
    """Whether one event's data may go out unparsed (see `unparsed_middles`).

    Never the data of several ``data`` lines (a bytearray): it goes out as one
    line, its LFs as spaces, which only JSON that parses allows.
    """
    return (
        type(payload) is bytes
        and payload[:1] == b"{"
        and unparsed_middles([payload], payload)
    )


_FINISH_KEY: Final = b'"finish_reason"'
_ESCAPE: Final = b"\\u00"  # how a key could spell "finish_reason" without those bytes
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


def same_json(a: object, b: object) -> bool:
    """`a == b` for decoded JSON: nesting too deep to compare counts as different."""
    try:
        return a == b
    except RecursionError:
        return False


def frame_fields(payload: Payload) -> dict[str, Any] | None:
    """A frame's keys and meta_info's keys, each value its JSON (`msgspec.Raw`), the data
    of several ``data`` lines as one line (`one_line`), so that the values can be written
    again into one SSE line.

    None for JSON that is not two such objects, or whose keys are not UTF-8 (a
    cumulative frame is checked no further than its finish reason until it is
    the answer): it cannot be written again.
    """
    try:
        data = payload if type(payload) is bytes else one_line(payload)  # bytes: no call
        fields: dict[str, Any] = _RAW_MEMBERS.decode(data)
        fields["meta_info"] = _RAW_MEMBERS.decode(fields["meta_info"])
    except (msgspec.DecodeError, KeyError, RecursionError):
        return None
    return fields


def one_line(payload: Payload) -> Payload:
    """An event's data as one line.

    The data of several ``data`` lines is joined with LF (in a bytearray),
    which in JSON the checks passed can only be whitespace: it becomes a space.
    """
    return payload.replace(b"\n", b" ") if type(payload) is bytearray else payload
