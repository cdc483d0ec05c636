"""The numerical algorithms the models are compared with and trained by: the classical baselines
(OLS, GD, Newton), closed-form optima, the Bayes floor, the ReLU-teacher baseline, the optimizers.

Imports icl_core.common only; no Ray, Optuna or analysis.
"""
