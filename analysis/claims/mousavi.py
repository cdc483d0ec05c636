"""Claims of mousavi (placeholder)."""

CLAIMS = ()
