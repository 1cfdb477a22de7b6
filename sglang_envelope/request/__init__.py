"""The request side: the client's body, its rules, the envelope and the engine request.

The public names are imported from `sglang_envelope` and its namespaces (docs/api.md);
these modules are its layout.
"""
