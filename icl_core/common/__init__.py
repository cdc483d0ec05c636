"""What every layer stands on: config validation primitives and ConfigError (validation), the
name -> (config, builder) registries (registry), the Batch contract between tasks and models
(batch), devices, dtypes and seeds (device), durations and the progress bar's line (progress),
torch.compile with a cache a shape (compiled).

Imports nothing of icl_core; no Ray, Optuna or analysis.
"""
