"""A fake SGLang engine for tests: `FakeEngine`, a plain ASGI 3 app (docs/testing.md).

Only the command line's demo imports this folder, to serve a request against it.
"""

from sglang_envelope.testing.answers import text_ids, token_text
from sglang_envelope.testing.engine import FakeEngine, Outcome

__all__ = ["FakeEngine", "Outcome", "text_ids", "token_text"]
