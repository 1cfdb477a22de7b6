"""The contract as data: the SGLang releases it holds for, and the rules checked after
dispatch.

`KNOWN_RELEASES` are the releases a `Target` may name; `DEPLOYMENT_RULES` are
the rules `build_engine_request` applies for a `Deployment`. The request rules
themselves, their codes and messages, are in docs/contract.md.
"""

from sglang_envelope.releases.target import KNOWN_RELEASES
from sglang_envelope.request.deployment import DEPLOYMENT_RULES

__all__ = ["DEPLOYMENT_RULES", "KNOWN_RELEASES"]
