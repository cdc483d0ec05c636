"""Claims of liu (placeholder)."""

CLAIMS = ()
