"""An incremental stream's deltas as the answer holds them: kept, cut and written.

`DeltaStore` keeps each field of `DELTA_FIELDS` as Python objects (the text's
pieces, the arrays' items: `aggregate_sse`). `JsonStore` turns each chunk's
deltas into JSON text once and drops their objects (`aggregate_sse_bytes`),
`CountStore` keeps only their counts (a relay in the engine's own mode), and
`BufferStore` each field's JSON in one growing buffer (a relay to a
cumulative client). Every store counts each field's entries (`total`).

A field's JSON goes around as the parts it joins to (per path, a list of
bytes): a store's, or those `cut_deltas` cuts from a cumulative frame for an
incremental client, as SGLang cuts them. `splice` is the one writer of a
frame with such parts spliced in.
"""

from __future__ import annotations

import io
from typing import Any, Final

import msgspec
from msgspec import UNSET

from sglang_envelope.errors.exceptions import ResponseError
from sglang_envelope.response.frames import decode_json
from sglang_envelope.response.sse import BytesLike
from sglang_envelope.response.views import (
    COUNTED_BY,
    DELTA_FIELDS,
    DELTA_ROWS,
    own_length,
)

__all__ = [
    "BufferStore",
    "CountStore",
    "DeltaStore",
    "JsonStore",
    "cut_deltas",
    "splice",
    "written",
]

_ENCODE: Final = msgspec.json.Encoder().encode
_ELEMENTS: Final = msgspec.json.Decoder(list[msgspec.Raw])
_PATHS: Final = tuple(path for path, _ in DELTA_FIELDS)
#: The one string field of DELTA_FIELDS: its pieces join without commas.
_TEXT: Final = "text"
_CLOSING: Final = {path: b'"' if kind is str else b"]" for path, kind in DELTA_FIELDS}
_MARK: Final = b"\x00"  # never in msgspec's JSON output, which escapes control characters
_MARKS: Final = {
    path: msgspec.Raw(b"%b%d%b" % (_MARK, n, _MARK)) for n, path in enumerate(_PATHS)
}
_MARKED: Final = {b"%d" % n: path for n, path in enumerate(_PATHS)}
_PLACES: Final = {path: (in_meta, key) for path, key, in_meta, _ in DELTA_ROWS}


class DeltaStore:
    """A stream's deltas as Python objects: per `DELTA_FIELDS` path, the text's pieces or
    the array's items so far; `present` holds the paths any frame had."""

    __slots__ = ("_pieces", "present")

    def __init__(self) -> None:
        self.present: set[str] = set()
        self.forget()

    def add_views(self, views: list[Any]) -> None:
        """Add the deltas of middle frames read through the incremental view, in order.

        The straight-line reads take 20-28% less time than a loop over
        DELTA_FIELDS (`_PATHS` lists them in their order); the text's pieces
        join into one string a call, so that they are freed as the stream goes.
        """
        pieces = self._pieces
        text = pieces["text"]
        text_start = len(text)
        add_text = text.append
        add_ids = pieces["output_ids"].extend
        add_token = pieces["meta_info.output_token_logprobs"].extend
        add_top = pieces["meta_info.output_top_logprobs"].extend
        add_ids_lp = pieces["meta_info.output_token_ids_logprobs"].extend
        add_mask = pieces["meta_info.output_token_sampling_mask"].extend
        add_mask_lp = pieces["meta_info.output_token_sampling_logprobs"].extend
        seen = [False] * 7
        for frame in views:
            meta = frame.meta_info
            if (value := frame.text) is not UNSET:
                add_text(value)
                seen[0] = True
            if (value := frame.output_ids) is not UNSET:
                add_ids(value)
                seen[1] = True
            if (value := meta.output_token_logprobs) is not UNSET:
                add_token(value)
                seen[2] = True
            if (value := meta.output_top_logprobs) is not UNSET:
                add_top(value)
                seen[3] = True
            if (value := meta.output_token_ids_logprobs) is not UNSET:
                add_ids_lp(value)
                seen[4] = True
            if (value := meta.output_token_sampling_mask) is not UNSET:
                add_mask(value)
                seen[5] = True
            if (value := meta.output_token_sampling_logprobs) is not UNSET:
                add_mask_lp(value)
                seen[6] = True
        self.present.update(path for path, was in zip(_PATHS, seen, strict=True) if was)
        if len(text) - text_start > 1:
            text[text_start:] = ["".join(text[text_start:])]

    def add_found(self, found: list[tuple[str, Any]]) -> None:
        """Add one frame's delta fields, as (path, value) of the right type."""
        for path, value in found:
            self.present.add(path)
            if type(value) is str:
                self._pieces[path].append(value)
            else:
                self._pieces[path].extend(value)

    def add_raw(self, view: Any, fields: dict[str, Any]) -> None:
        """Add one middle frame given its view and its keys' JSON (`frame_fields`)."""
        self.add_views([view])

    def total(self, path: str) -> int:
        """How many entries the field at `path` has so far (characters of the text)."""
        pieces = self._pieces[path]
        return sum(map(len, pieces)) if path == _TEXT else len(pieces)

    def end_chunk(self) -> None:
        """Called once the frames of a chunk of the stream are added."""

    def forget(self) -> None:
        """Drop every delta (a cumulative stream's answer is its terminal frame): the
        store is as made."""
        self._pieces: dict[str, list[Any]] = {path: [] for path in _PATHS}
        self.present.clear()

    def assemble(self, last: dict[str, Any], *, copy: bool) -> dict[str, Any]:
        """`last` with every delta field holding its concatenation (new lists and strings
        the caller may keep, with `copy`)."""
        response = dict(last)
        meta = dict(last["meta_info"])
        for path, key, in_meta, _ in DELTA_ROWS:
            if path not in self.present:
                continue
            pieces = self._pieces[path]
            if path == _TEXT:
                value: Any = "".join(pieces)
                if copy:
                    # Join each piece once, however often this is called.
                    pieces[:] = [value]
            else:
                value = pieces.copy() if copy else pieces
            (meta if in_meta else response)[key] = value
        response["meta_info"] = meta
        return response


class JsonStore(DeltaStore):
    """The deltas as JSON text: those of each chunk are encoded at its end (`end_chunk`)
    and their objects dropped; per path, the JSON inside its quotes or brackets, in
    exact-size pieces (no commas between), one a chunk."""

    __slots__ = ("_counts", "_json")

    def end_chunk(self) -> None:
        """Move the deltas added since the last call from objects to JSON text."""
        for path, pieces in self._pieces.items():
            if not pieces:
                continue
            value: Any = "".join(pieces) if path == _TEXT else pieces
            self._counts[path] += len(value)  # entries, or characters of the text
            if value:
                self._keep_json(path, _ENCODE(value))
            pieces.clear()

    def _keep_json(self, path: str, json: bytes) -> None:
        """Keep a delta's JSON (not empty) inside its quotes or brackets, as an exact-size
        piece, let go of once written (`written`)."""
        self._json[path].append(json[1:-1])

    def total(self, path: str) -> int:
        return self._counts[path] + super().total(path)

    def forget(self) -> None:
        super().forget()
        self._json: dict[str, list[BytesLike]] = {path: [] for path in _PATHS}
        self._counts = dict.fromkeys(_PATHS, 0)

    def take_values(self) -> dict[str, list[BytesLike]]:
        """Per delta field any frame had, the parts its JSON joins to; the store is left
        empty, so that the parts live only in what this returns."""
        self.end_chunk()
        values: dict[str, list[BytesLike]] = {
            path: [b'"', *pieces, b'"']
            if path == _TEXT
            else [b"[", *_commas(pieces), b"]"]
            for path, pieces in self._json.items()
            if path in self.present
        }
        self.forget()
        return values


class CountStore(JsonStore):
    """The deltas' counts alone, for the final checks of a stream known incremental: each
    chunk's deltas are counted at its end and dropped."""

    __slots__ = ()

    def _keep_json(self, path: str, json: bytes) -> None:
        pass


class BufferStore(JsonStore):
    """The deltas' JSON in one growing buffer a field (its opening quote or bracket, then
    the deltas, without the closing byte), which `values` hands to `splice`.

    `add_raw` appends a frame's deltas' JSON as it came; the deltas of other
    frames are encoded once a chunk (`JsonStore.end_chunk`).
    """

    __slots__ = ("_buffers", "_values")

    def add_raw(self, view: Any, fields: dict[str, Any]) -> None:
        """Add a middle frame's deltas as their JSON came; call it after `end_chunk`."""
        meta = view.meta_info
        raw_meta = fields["meta_info"]
        for path, key, in_meta, _ in DELTA_ROWS:
            json = (raw_meta if in_meta else fields).get(key)
            if json is None:
                continue
            self.present.add(path)
            value = getattr(meta if in_meta else view, key)
            self._counts[path] += len(value)  # entries, or characters of the text
            if value:
                self._keep_json(path, json)

    def _keep_json(self, path: str, json: BytesLike) -> None:
        """Add a delta's JSON to its field's buffer: all of it, then its closing byte is
        dropped and its opening byte becomes the comma between two array deltas (or is
        dropped: a first delta, or text)."""
        buffer = self._buffers[path]
        end = len(buffer)
        buffer += json
        del buffer[-1]
        if end > 1 and path != _TEXT:
            buffer[end] = 44  # the opening bracket becomes a comma
        else:
            del buffer[end]

    def forget(self) -> None:
        super().forget()
        self._buffers = {
            path: bytearray(b'"' if path == _TEXT else b"[") for path in _PATHS
        }
        self._values: dict[str, list[BytesLike]] = {}

    def values(self) -> dict[str, list[BytesLike]]:
        """Per delta field any frame had, the parts its JSON so far joins to (its buffer
        and its closing byte), for `splice`; the same dict while no field is added."""
        if len(self._values) != len(self.present):
            present = self.present
            self._values = {
                path: [buffer, _CLOSING[path]]
                for path, buffer in self._buffers.items()
                if path in present
            }
        return self._values


def _commas(pieces: list[BytesLike]) -> list[BytesLike]:
    """Array insides, with the commas that join them."""
    if len(pieces) < 2:
        return pieces
    out: list[BytesLike] = [b","] * (2 * len(pieces) - 1)
    out[::2] = pieces
    return out


def splice(
    frame: dict[str, Any],
    values: dict[str, list[BytesLike]],
    prefix: bytes,
    suffix: bytes,
    *,
    owned: bool = False,
) -> list[BytesLike]:
    """The parts of `frame` as JSON between `prefix` and `suffix`, each `DELTA_FIELDS`
    path of `values` holding the JSON its parts join to: joined, or `written`.

    A field keeps its place among the frame's keys; one the frame lacks goes
    last in its object, as SGLang's ``_coalesce_streaming_chunks`` puts it.
    msgspec writes the frame with numbered NUL-delimited marks where the values
    go (JSON text holds no raw NUL) and the parts go between: each byte of them
    is copied once. With `owned`, `frame` and its ``meta_info`` are the caller's to
    write over (one read for this, `frame_fields`): the marks go into them, uncopied.
    """
    if owned:
        top = frame
        meta = frame["meta_info"]
    else:
        top = dict(frame)
        meta = dict(frame["meta_info"])
        top["meta_info"] = meta
    for path in values:
        in_meta, key = _PLACES[path]
        (meta if in_meta else top)[key] = _MARKS[path]
    # The JSON around the marks, and at odd places the paths they stand for, in key order.
    skeleton = _ENCODE(top).split(_MARK)
    parts: list[BytesLike] = [prefix, skeleton[0]]
    for at in range(1, len(skeleton), 2):
        parts += values[_MARKED[skeleton[at]]]
        parts.append(skeleton[at + 1])
    parts.append(suffix)
    return parts


def written(parts: list[BytesLike]) -> bytes:
    """`b"".join(parts)`, each part let go of once copied.

    The parts of an answer hold about its size; joining them at once would
    hold both whole. `io.BytesIO` grows in place and hands over its buffer as
    the bytes (``getvalue`` copies nothing when no view of it is held), so the
    peak is the answer and the parts not yet written.
    """
    out = io.BytesIO()
    for at, part in enumerate(parts):
        out.write(part)
        parts[at] = b""
    del part
    return out.getvalue()


def cut_deltas(
    fields: dict[str, Any], sent: dict[str, Any], deltas: dict[str, list[BytesLike]]
) -> dict[str, Any]:
    """Put into `deltas` each field's JSON past what `sent` holds;
    return what `fields` holds.

    What a frame holds is, per delta field, its text's JSON inside the quotes
    or its list's JSON elements as of its count (`COUNTED_BY`). A list's delta
    is its elements past those sent; SGLang cuts every list at the ids sent
    (its output offset), which is the same number for its streams, whose
    lists grow a token at a time.
    A frame that does not extend the last one sent has no delta.
    """
    held: dict[str, Any] = {}
    meta = fields["meta_info"]
    for path, key, in_meta, kind in DELTA_ROWS:
        is_text = kind is str
        raw = (meta if in_meta else fields).get(key)
        if raw is None:
            if path in sent:  # an incremental frame cannot take a field back
                raise _no_delta(path, "is missing, though the last frame sent had it")
            continue
        data = bytes(raw)
        if data[:1] != (b'"' if is_text else b"["):
            raise _no_delta(path, f"is not {'a string' if is_text else 'an array'}")
        if is_text:
            text = data[1:-1]
            held[path] = text
            deltas[path] = [b'"', _text_delta(sent.get(path, b""), text), b'"']
            continue
        try:
            elements = _ELEMENTS.decode(data)
        except (msgspec.DecodeError, RecursionError) as exc:
            raise ResponseError(f"{path} is not valid JSON: {exc}") from exc
        count_key = COUNTED_BY[path]
        count_json = meta.get(count_key)
        what = f"meta_info.{count_key}"
        count = None if count_json is None else decode_json(count_json, what)
        elements = elements[: own_length(count, len(elements))]
        held[path] = elements
        before = sent.get(path, [])
        if not _extends(elements, before):
            raise _no_delta(path, "does not extend the last frame sent")
        deltas[path] = [b"[", b",".join(elements[len(before) :]), b"]"]
    return held


def _text_delta(sent: bytes, text: bytes) -> bytes:
    """The JSON string inside for `text` past `sent` (both JSON string insides)."""
    if text.startswith(sent):
        return text[len(sent) :]
    old = decode_json(b'"' + sent + b'"', "text")
    new = decode_json(b'"' + text + b'"', "text")
    if not new.startswith(old):
        raise _no_delta("text", "does not extend the last frame sent")
    return _ENCODE(new[len(old) :])[1:-1]


def _no_delta(path: str, fault: str) -> ResponseError:
    return ResponseError(f"{path} {fault}, so no incremental delta exists")


def _extends(elements: list[msgspec.Raw], before: list[msgspec.Raw]) -> bool:
    """Whether a list's JSON elements begin with `before`'s, as JSON values."""
    head = elements[: len(before)]
    if head == before:  # the same bytes: SGLang writes each entry alike every time
        return True
    if len(head) < len(before):
        return False
    try:
        return all(
            a == b or decode_json(a, "an entry") == decode_json(b, "an entry")
            for a, b in zip(head, before, strict=True)
        )
    except (ResponseError, RecursionError):
        return False
