"""The response side: SSE frames and unary bodies from SGLang, aggregated or relayed into the client's mode.

The public names are imported from `sglang_envelope`; these modules are its layout.
"""
