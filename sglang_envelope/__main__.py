"""`python -m sglang_envelope`: the `sglang-envelope` command line."""

from sglang_envelope.cli.main import main

raise SystemExit(main())
