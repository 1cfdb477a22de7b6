"""Types of the values the library hands back, for annotating your own code.

The functions that make these values are imported from `sglang_envelope`:
`decode_sequences` gives `Sequences`, `error_response` an `ErrorAnswer`,
`plan_abort` an `AbortPlan` and `run_abort` an `AbortOutcome`; the others are
fields or keys of the main types (`EngineRequest.body`, `SamplingParams.watermark`,
`GenerateResponse["meta_info"]`, `RequestRejected.code`).
"""

from sglang_envelope.cancel.plan import AbortPlan
from sglang_envelope.cancel.run import AbortOutcome, AbortSend
from sglang_envelope.errors.answers import ErrorAnswer
from sglang_envelope.errors.exceptions import RejectionCode
from sglang_envelope.request.engine import EngineBody, RoleName
from sglang_envelope.request.sequences import Sequences
from sglang_envelope.request.types import Watermark
from sglang_envelope.response.types import MetaInfo

__all__ = [
    "AbortOutcome",
    "AbortPlan",
    "AbortSend",
    "EngineBody",
    "ErrorAnswer",
    "MetaInfo",
    "RejectionCode",
    "RoleName",
    "Sequences",
    "Watermark",
]
