"""Hypothesis strategies shared by every test module.

Each section belongs to one part of the library; draw from here rather than
defining strategies inside a test module.
"""

from __future__ import annotations

# --- request side ---

# --- SSE and aggregation ---

# --- flat top logprobs ---
