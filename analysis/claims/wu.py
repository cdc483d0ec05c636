"""Claims of wu (placeholder)."""

CLAIMS = ()
