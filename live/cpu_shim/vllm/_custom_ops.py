"""The one name SGLang imports from vLLM's custom ops on the CPU path; calling it is a bug."""

from __future__ import annotations

from typing import NoReturn


def rotary_embedding(*args: object, **kwargs: object) -> NoReturn:
    raise NotImplementedError("the live suite's vllm._custom_ops.rotary_embedding was called")
