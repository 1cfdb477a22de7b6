"""The `sglang-envelope` command line and its demo data.

The public names are imported from `sglang_envelope`; these modules are its layout.
"""
