"""icl_core: every model, task, baseline, trainer and evaluator a scaling-study trial needs."""

__version__ = "0.1.0"
