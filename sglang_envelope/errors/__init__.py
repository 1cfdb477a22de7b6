"""The library's exceptions, and refusals answered as SGLang answers them.

The public names are imported from `sglang_envelope`; these modules are its layout.
"""
