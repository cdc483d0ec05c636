"""Training and evaluation of members: the one training driver (train), stacks of members trained
at once (stacked), the evaluator (evaluate) and the trivial predictors it measures (trivial), a
step's FLOPs from the config (flops), throughput records (throughput).

Imports spec, models, tasks, algorithms and common; no Ray, Optuna or analysis.
"""
