"""Which SGLang release and transport a request is for, and each release's request tables.

The public names are imported from `sglang_envelope` and its namespaces (docs/api.md);
these modules are its layout.
"""
