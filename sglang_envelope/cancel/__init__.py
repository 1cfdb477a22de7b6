"""Cancelling an engine request: the abort plan, run with the caller's transport.

The public names are imported from `sglang_envelope` and its namespaces (docs/api.md);
these modules are its layout.
"""
