"""Claims of algoformer (placeholder)."""

CLAIMS = ()
