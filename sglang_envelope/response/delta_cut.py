"""Cut a cumulative frame into the deltas SGLang's incremental mode sends, as JSON text.

A relay that reads a cumulative engine stream for an incremental client sends,
for each frame, each delta field past what the last frame sent held: a text
past the text sent, a list's JSON elements past those sent (SGLang's output
offset, ``tokenizer_manager._slice_streaming_output_meta_info``). The values
stay the JSON they came in (`msgspec.Raw`); nothing is decoded and encoded
again but a text whose escapes differ between frames.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec
from msgspec import Raw

from sglang_envelope.errors.exceptions import ResponseError
from sglang_envelope.response.frames import decode_json
from sglang_envelope.response.sse import BytesLike
from sglang_envelope.response.views import DELTA_ROWS

__all__ = ["cut_deltas"]

_ENCODE: Final = msgspec.json.Encoder().encode
_ELEMENTS: Final = msgspec.json.Decoder(list[Raw])


def cut_deltas(
    fields: dict[str, Any], sent: dict[str, Any], deltas: dict[str, list[BytesLike]]
) -> dict[str, Any]:
    """Put into `deltas` each field's JSON past what `sent` holds;
    return what `fields` holds.

    What a frame holds is, per delta field, its text's JSON inside the quotes
    or its list's JSON elements. A list's delta is its elements past those
    sent; SGLang cuts every list at the ids sent (its output offset), which
    is the same number for its streams, whose lists grow a token at a time.
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


def _extends(elements: list[Raw], before: list[Raw]) -> bool:
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
