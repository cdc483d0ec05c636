"""What a run is, as data: the member config (task, model, train and eval sections, its config
hash: config) and the declarative Study (a base config, a grid, presets: study).

Imports models, tasks, algorithms and common; no Ray, Optuna or analysis.
"""
