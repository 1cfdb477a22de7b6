"""SGLang's request-header overrides: the client's own body bytes sent as the engine
request.

An SGLang (0.5.22, 0.5.23) run with `SGLANG_ENABLE_REQUEST_HEADER_OVERRIDES=1`
sets some engine fields from `x-override-*` headers; `header_overrides` gives
those headers for an engine request, when headers can carry every difference.
`Service(..., header_overrides=True)` uses it. See docs/frontend.md.
"""

from sglang_envelope.request.engine import OVERRIDE_HEADERS, header_overrides

__all__ = ["OVERRIDE_HEADERS", "header_overrides"]
