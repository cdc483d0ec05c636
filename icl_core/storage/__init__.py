"""What a study leaves in its storage: the row store (store), a member's files (member_store,
artifacts), provenance columns, claims (leases, on a filesystem or S3: claims, object_claims),
compaction, a search's Optuna journal (journal), signed Ray Tune state (signing).

Imports nothing else of icl_core; never analysis or Ray (journal uses Optuna's storage only).
"""
