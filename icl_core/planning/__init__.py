"""Planning before anything runs: the cost model (cost) and its calibration on the device
(calibration), resources per trial and packing members into trials (resources), peak memory
(memory), the cluster simulator (schedule).

Imports training, spec and below; never storage, Ray, Optuna or analysis.
"""
