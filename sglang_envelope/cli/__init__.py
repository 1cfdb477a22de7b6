"""The `sglang-envelope` command line and its demo data.

The public names are imported from `sglang_envelope` and its namespaces (docs/api.md);
these modules are its layout.
"""
