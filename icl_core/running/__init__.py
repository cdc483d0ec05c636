"""Running plans on Ray Tune (or Optuna alone): plans of a sweep's studies (plans), one pool of
trials (trial_pool), Ray start-up and Tune runs (ray_launch), the function Tune runs and the
trial format (tune_trainable), a trial's members (trial), searches (search, optuna_searcher),
experiment tracking (tracking), a study's manifest and end report (study_report), checks of the
command line's places (preflight).

Imports planning, storage, training and below, and analysis (figures at a study's end).
"""
