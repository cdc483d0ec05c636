"""Running plans on Ray Tune (or Optuna alone): plans of a sweep's studies (plans), one pool of
trials (trial_pool), Ray start-up and Tune runs (ray_launch), the function Tune runs, the
trial format and a trial's members as flat hyperparameters for the trackers (tune_trainable),
a trial's members (trial), a grid trial's checkpoints in the store, under Tune or without it
(store_checkpoints), searches (search; its persisted Optuna searcher: optuna_searcher),
tracking (tracking: TensorBoard; wandb_mlflow: --logger), a study's manifest and end report
(study_report).

Imports planning, storage, training and below; never analysis (a study's figures are drawn by
the function the face hands down) nor the face (icl).
"""
