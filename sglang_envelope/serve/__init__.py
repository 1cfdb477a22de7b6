"""The serving loop: a frontend or worker over the caller's transport (see `Service`)."""
