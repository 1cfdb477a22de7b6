"""The deployment a server serves, read once at its start from SGLang's own answers.

`read_deployment` asks SGLang ``GET /get_server_info`` through the caller's
transport (any object with ``async get(path) -> (status, body)``, as
`HttpxTransport` and `AiohttpTransport` have) and builds the `Deployment`
(`Deployment.from_server_info`). SGLang does not say the model's vocabulary:
the caller gives the model's ``config.json`` or states it, and a server that
does neither is stopped at its start, with a message saying what to pass: one
id outside the vocabulary stops every SGLang process, so no size is guessed.
"""

from __future__ import annotations

import os
from typing import Final, Protocol

import msgspec

from sglang_envelope.cancel.run import awaited
from sglang_envelope.errors.exceptions import (
    EnvelopeError,
    LimitExceeded,
    UpstreamError,
    show_value,
)
from sglang_envelope.request.deployment import Deployment

__all__ = [
    "MAX_MODEL_CONFIG_BYTES",
    "MAX_SERVER_INFO_BYTES",
    "SERVER_INFO_PATH",
    "ServerInfoSource",
    "read_deployment",
]

SERVER_INFO_PATH: Final = "/get_server_info"
#: The largest ``/get_server_info`` answer read (SGLang 0.5.23's is about 25 KiB).
MAX_SERVER_INFO_BYTES: Final = 4 << 20
#: The largest ``config.json`` read (a model's is a few KiB).
MAX_MODEL_CONFIG_BYTES: Final = 4 << 20
_NO_VOCABULARY: Final = (
    "the model's vocabulary is not known (SGLang's /get_server_info does not say it): "
    "pass model_config, the path of the model's config.json, or vocab_size, its "
    "vocab_size ('none' checks no id); the apps of docs/frontend.md read them from "
    "MODEL_CONFIG and VOCAB_SIZE"
)


class ServerInfoSource(Protocol):
    """What `read_deployment` reads the server through: a transport's ``get``."""

    async def get(self, path: str) -> tuple[int, bytes]:
        """GET `path` from SGLang: the HTTP status and the body."""
        ...


def _stated_vocabulary(vocab_size: object) -> int | None:
    """A stated vocabulary: an int >= 1, or text as an environment variable holds it
    (digits, or ``none``: no id is checked)."""
    if type(vocab_size) is int and vocab_size >= 1:
        return vocab_size
    if type(vocab_size) is str:
        text = vocab_size.strip()
        if text.lower() == "none":
            return None
        if text.isascii() and text.isdigit() and len(text) < 12 and int(text) >= 1:
            return int(text)
    raise EnvelopeError(
        f"vocab_size: expected an integer >= 1 or 'none', got {vocab_size!r:.80}"
    )


def _config_bytes(model_config: bytes | str | os.PathLike[str]) -> bytes:
    """The model's ``config.json``: `model_config` itself (bytes), or the file named."""
    if isinstance(model_config, bytes):
        data = model_config
    elif isinstance(model_config, (str, os.PathLike)):
        try:
            with open(model_config, "rb") as file:
                data = file.read(MAX_MODEL_CONFIG_BYTES + 1)
        except OSError as error:
            raise EnvelopeError(f"model_config: cannot read {error}") from None
    else:
        raise EnvelopeError(
            "model_config must be bytes or a path, got " + type(model_config).__name__
        )
    if len(data) > MAX_MODEL_CONFIG_BYTES:
        raise LimitExceeded(
            "model_config",
            MAX_MODEL_CONFIG_BYTES,
            f"model_config is more than {MAX_MODEL_CONFIG_BYTES} bytes",
        )
    return data


async def _server_info(server: ServerInfoSource) -> bytes:
    if not callable(getattr(server, "get", None)):
        raise EnvelopeError(
            "server must have an async get(path) method, as HttpxTransport and "
            f"AiohttpTransport have; got {type(server).__name__}"
        )
    answer = await awaited(server.get(SERVER_INFO_PATH), "server.get", None)
    if (
        type(answer) is not tuple
        or len(answer) != 2
        or type(answer[0]) is not int
        or not isinstance(answer[1], (bytes, bytearray, memoryview))
    ):
        raise EnvelopeError(
            "server.get must return (status, body), an int and bytes, got "
            + show_value(answer)
        )
    status, body = answer
    if status != 200:
        shown = bytes(body[:200]).decode("utf-8", "replace")
        raise UpstreamError(
            f"SGLang answered GET {SERVER_INFO_PATH} with {status}: {shown}"
        )
    if len(body) > MAX_SERVER_INFO_BYTES:
        raise LimitExceeded(
            "server_info",
            MAX_SERVER_INFO_BYTES,
            f"the {SERVER_INFO_PATH} answer is {len(body)} bytes, more than "
            f"{MAX_SERVER_INFO_BYTES}",
        )
    return bytes(body)


async def read_deployment(
    server: ServerInfoSource,
    *,
    model_config: bytes | str | os.PathLike[str] | None = None,
    vocab_size: int | str | None = None,
) -> Deployment:
    """The deployment the SGLang server behind `server` describes, with the model's
    vocabulary: read once, when a server starts (Starlette's lifespan, aiohttp's
    ``cleanup_ctx``).

    - `server`: a transport with ``async get(path)`` (`HttpxTransport`,
      `AiohttpTransport`); ``GET /get_server_info`` is asked once.
    - `model_config`: the model's ``config.json``, as bytes or the path of the
      file: its ``vocab_size`` (and a Mixture-of-Experts model's shape).
    - `vocab_size`: the vocabulary stated: an int, or text as an environment
      variable holds it (digits, or ``none`` to check no id, as
      ``Deployment(vocab_size=None)``). None or ``""``: not stated.

    Exactly one of `model_config` and `vocab_size` is given; with neither, or
    both, it raises `EnvelopeError` saying what to pass, before asking SGLang.
    SGLang answering anything but 200 raises `UpstreamError`; an answer that is
    not SGLang's, or an unreadable file, `EnvelopeError` naming it (`LimitExceeded`
    past 4 MiB); the transport's own failures (`UpstreamError`) propagate.
    """
    stated = vocab_size is not None and vocab_size != ""
    if (model_config is not None) == stated:
        given = "both were given" if stated else "neither was given"
        raise EnvelopeError(f"{_NO_VOCABULARY} ({given})")
    if model_config is not None:
        config = _config_bytes(model_config)
        return Deployment.from_server_info(
            await _server_info(server), model_config=config
        )
    vocabulary = _stated_vocabulary(vocab_size)
    # The server's description, with the vocabulary stated (checked above) in place.
    described = Deployment.from_server_info(
        await _server_info(server), model_config=b'{"vocab_size": 1}'
    )
    return msgspec.structs.replace(described, vocab_size=vocabulary)
