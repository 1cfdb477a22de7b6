"""`python -m sglang_envelope`: the `sglang-envelope` command line."""

from sglang_envelope._cli import main

raise SystemExit(main())
