"""The response side: SGLang's SSE frames and bodies, aggregated or relayed to the client.

The public names are imported from `sglang_envelope` and its namespaces (docs/api.md);
these modules are its layout.
"""
