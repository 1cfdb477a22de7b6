"""Cancelling an engine request: the abort plan as data, and carrying it out with the caller's transport.

The public names are imported from `sglang_envelope`; these modules are its layout.
"""
