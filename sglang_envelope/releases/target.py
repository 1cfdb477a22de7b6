"""Which SGLang a request is for: a release and a transport, and that release's tables.

A `Target` names an SGLang release and how requests reach it: `"http"`, the
`/generate` route (FastAPI's parse, then the HTTP contract gate where the
release wires one, then the engine's steps), or `"engine"`, in-process
(`GenerateReqInput(**kwargs)` handed to the tokenizer manager). Its `tables`
are that release's contract, generated from the release's own code into
`tables.py`. `Target.installed()` reads the field lists from the SGLang
importable in this process instead, so an in-process worker on a release newer
than the tables still gets its exact fields.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from typing import Any

import msgspec

from sglang_envelope.errors.exceptions import EnvelopeError, show_value
from sglang_envelope.releases.tables import RELEASES, TABLES

__all__ = [
    "INPUTS",
    "KNOWN_RELEASES",
    "TRANSPORTS",
    "UNKNOWN_FIELD_POLICIES",
    "Check",
    "Features",
    "Gate",
    "InstalledFields",
    "ReleaseTables",
    "Target",
    "first_release_with",
]

#: The SGLang releases with generated tables, oldest first.
KNOWN_RELEASES: tuple[str, ...] = RELEASES
#: How requests reach SGLang: its `/generate` route, or in-process.
TRANSPORTS = ("http", "engine")
#: What a request's prompt may be: token ids only (`input_ids`), or also `text` and media.
INPUTS = ("tokens", "text")
#: What happens to a key the tables do not know: refused, or passed through unchanged.
UNKNOWN_FIELD_POLICIES = ("reject", "pass")


class Check(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One of SGLang's checks, as its source writes it.

    `message` is SGLang's text as a `str.format` template; `fields` are the
    request fields the check reads; `needs` names what it needs from the
    deployment (`vocab_size`, `tokenizer`; empty when the request alone decides).
    """

    error: str
    message: str
    condition: str
    fields: tuple[str, ...]
    needs: tuple[str, ...]
    via: str | None


class Gate(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The HTTP contract gate a release wires into `/generate`."""

    fields: tuple[str, ...]
    unknown_field: str
    sampling_keys: tuple[str, ...]
    unknown_sampling_key: str
    watermark_keys: tuple[str, ...]


class Features(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What comes and goes between releases, as one release has it."""

    output_flat: bool
    flat_fields_builders: tuple[str, ...]
    watermark_top_level: bool
    watermark_in_sampling_params: bool
    mm_processor_kwargs: bool
    gate: bool
    priority_range_checked: bool


class ReleaseTables(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True
):
    """One SGLang release's request contract (see `tables.py`)."""

    sglang: str
    generate_req_input_fields: tuple[str, ...]
    sampling_params_fields: tuple[str, ...]
    sampling_params_internal_fields: tuple[str, ...]
    gate: Gate | None
    init_checks: tuple[Check, ...]
    normalize_checks: tuple[Check, ...]
    verify_checks: tuple[Check, ...]
    tokenizer_manager_checks: tuple[Check, ...]
    priority_range: tuple[int, int] | None
    limits: dict[str, int]
    features: Features


_TABLES: dict[str, ReleaseTables] = {
    release: msgspec.convert(table, ReleaseTables) for release, table in TABLES.items()
}
#: Every field name any release fills in itself; never a caller's argument.
_INTERNAL_SAMPLING_FIELDS = frozenset(
    name for table in _TABLES.values() for name in table.sampling_params_internal_fields
)


class InstalledFields(msgspec.Struct, frozen=True, kw_only=True):
    """The field lists read from an SGLang installed in this process."""

    version: str
    generate_req_input_fields: tuple[str, ...]
    sampling_params_fields: tuple[str, ...]

    def __post_init__(self) -> None:
        if type(self.version) is not str:
            got = show_value(self.version)
            raise EnvelopeError(f"InstalledFields.version must be a string, got {got}")
        for name in ("generate_req_input_fields", "sampling_params_fields"):
            names = getattr(self, name)
            if type(names) is not tuple or not all(type(item) is str for item in names):
                got = show_value(names)
                raise EnvelopeError(
                    f"InstalledFields.{name} must be a tuple of strings, got {got}"
                )


def _one_of(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if type(value) is not str or value not in allowed:
        listed = ", ".join(repr(item) for item in allowed)
        raise EnvelopeError(
            f"Target.{name} must be one of {listed}, got {show_value(value)}"
        )


class Target(msgspec.Struct, frozen=True, kw_only=True):
    """An SGLang release and transport: what a request must be to be served there.

    `sglang` is a release in `KNOWN_RELEASES`, `transport` is `"http"` or
    `"engine"`, and `unknown_fields` is `"reject"` (keys the tables do not know
    are refused) or `"pass"` (they pass through unchanged, for a newer SGLang).
    `input` is `"tokens"` (the prompt is `input_ids`; `text` and the media
    fields are refused) or `"text"` (also `text`, one string, and the media
    fields, under SGLang's rules: see docs/contract.md, "Text input").
    `installed_fields` is set by `Target.installed()`. Raises `EnvelopeError`,
    naming the field, for anything else.
    """

    sglang: str = "0.5.23"
    transport: str = "http"
    unknown_fields: str = "reject"
    installed_fields: InstalledFields | None = None
    input: str = "tokens"

    def __post_init__(self) -> None:
        _one_of("sglang", self.sglang, KNOWN_RELEASES)
        _one_of("transport", self.transport, TRANSPORTS)
        _one_of("unknown_fields", self.unknown_fields, UNKNOWN_FIELD_POLICIES)
        _one_of("input", self.input, INPUTS)
        fields = self.installed_fields
        if fields is not None and not isinstance(fields, InstalledFields):
            got = type(fields).__name__
            raise EnvelopeError(
                f"Target.installed_fields must be InstalledFields, got {got}"
            )

    @property
    def tables(self) -> ReleaseTables:
        """The release's tables; the field lists are the installed SGLang's, if read."""
        tables = _TABLES[self.sglang]
        fields = self.installed_fields
        if fields is None:
            return tables
        return msgspec.structs.replace(
            tables,
            generate_req_input_fields=fields.generate_req_input_fields,
            sampling_params_fields=fields.sampling_params_fields,
        )

    @property
    def gate(self) -> Gate | None:
        """The HTTP contract gate requests pass on this target
        (None in-process or unwired)."""
        return _TABLES[self.sglang].gate if self.transport == "http" else None

    @classmethod
    def installed(
        cls,
        *,
        transport: str = "engine",
        unknown_fields: str = "reject",
        input: str = "tokens",
    ) -> Target:
        """The target of the SGLang importable in this process, fields read at run time.

        The fields are `GenerateReqInput`'s and `SamplingParams`' (its
        `__struct_fields__` without the fields SGLang fills in itself); the
        other tables are those of the newest known release not newer than the
        installed one. Raises `EnvelopeError` when SGLang cannot be imported,
        is older than every known release, or does not have the expected shapes.
        """
        try:
            sglang = importlib.import_module("sglang")
            io_struct = importlib.import_module("sglang.srt.managers.io_struct")
            sampling = importlib.import_module("sglang.srt.sampling.sampling_params")
        except Exception as error:  # ImportError, or whatever SGLang's import raises
            raise EnvelopeError(
                f"Target.installed() needs SGLang importable in this process: {error}"
            ) from None
        version = getattr(sglang, "__version__", None)
        release = _release_for(version)
        fields = InstalledFields(
            version=str(version),
            generate_req_input_fields=_request_fields(
                getattr(io_struct, "GenerateReqInput", None)
            ),
            sampling_params_fields=_sampling_fields(
                getattr(sampling, "SamplingParams", None)
            ),
        )
        return cls(
            sglang=release,
            transport=transport,
            unknown_fields=unknown_fields,
            installed_fields=fields,
            input=input,
        )


_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)")


def _release_for(version: object) -> str:
    """The newest known release not newer than the installed `version`."""
    match = _VERSION.match(version) if type(version) is str else None
    if match is None:
        got = show_value(version)
        raise EnvelopeError(f"the installed SGLang's __version__ is not a release: {got}")
    installed = tuple(map(int, match.groups()))
    # A known release is exactly its three numbers.
    older = [r for r in KNOWN_RELEASES if tuple(map(int, r.split("."))) <= installed]
    if not older:
        raise EnvelopeError(
            f"the installed SGLang {version} is older than every release with tables "
            f"({', '.join(KNOWN_RELEASES)})"
        )
    return older[-1]


def _request_fields(request_class: Any) -> tuple[str, ...]:
    if not (isinstance(request_class, type) and dataclasses.is_dataclass(request_class)):
        raise EnvelopeError(
            "the installed SGLang's sglang.srt.managers.io_struct.GenerateReqInput "
            "is not a dataclass"
        )
    return tuple(field.name for field in dataclasses.fields(request_class) if field.init)


def _sampling_fields(params_class: Any) -> tuple[str, ...]:
    names = getattr(params_class, "__struct_fields__", None)
    if not (isinstance(names, tuple) and all(type(name) is str for name in names)):
        raise EnvelopeError(
            "the installed SGLang's sglang.srt.sampling.sampling_params.SamplingParams "
            "is not a msgspec Struct"
        )
    return tuple(name for name in names if name not in _INTERNAL_SAMPLING_FIELDS)


def first_release_with(field: str, *, sampling: bool = False) -> str | None:
    """The oldest known release with `field` in its `GenerateReqInput` (or
    `SamplingParams`)."""
    for release in KNOWN_RELEASES:
        tables = _TABLES[release]
        names = (
            tables.sampling_params_fields
            if sampling
            else tables.generate_req_input_fields
        )
        if field in names:
            return release
    return None
