"""The library's exceptions, and refusals answered as SGLang answers them.

The public names are imported from `sglang_envelope` and its namespaces (docs/api.md);
these modules are its layout.
"""
