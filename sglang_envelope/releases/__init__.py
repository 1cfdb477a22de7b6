"""Which SGLang release and transport a request is for, and each release's request tables.

The public names are imported from `sglang_envelope`; these modules are its layout.
"""
