"""Experiment tracking through Ray Tune's own loggers: each trial's folder under
`<storage>/<sweep>/tune/` (one pool per sweep file; several files: `<storage>/_pool/tune`;
a search: `<storage>/<sweep>/<search>/tune`) gets `result.json`, `progress.csv`, `params.json`
and a TensorBoard event file (`tensorboard --logdir results/<sweep>/tune`).

A trial's Tune config is the one trial format (`{"spec": TrialSpec JSON}`, icl_core.running.tune_trainable),
which TensorBoard would show as one long string; `TrialHparams` logs instead each member's
config flattened (`model.depth`, `train.lr`, ... and `config_hash`) as the trial's hparams. A
packed trial logs the fields its members share as they are, and a field they differ in as
the list of its values ("1, 2"). The rows in the store stay the results; these are for
looking at a sweep while it runs. `--logger wandb|mlflow` adds Weights & Biases and MLflow,
with the same hparams (icl_core.running.wandb_mlflow).
"""

from __future__ import annotations

import logging
import os

from ray.tune.logger import TBXLoggerCallback

from icl_core.running.tune_trainable import trial_hparams

logger = logging.getLogger(__name__)


class TrialHparams(TBXLoggerCallback):
    """Tune's TensorBoard logger, with the members' flattened configs as hparams (in place
    of the trial config's opaque spec string). Replaces Tune's default TBX logger."""

    def _try_log_hparams(self, trial, result: dict) -> None:
        from tensorboardX.summary import hparams

        try:
            tags = hparams(hparam_dict=trial_hparams(trial.config), metric_dict=result)
        except Exception as exc:  # tracking must never fail a sweep
            logger.warning("TensorBoard hparams not written for %s: %s", trial, exc)
            return
        for tag in tags:
            self._trial_writer[trial].file_writer.add_summary(tag)


def tracking_callbacks(loggers=(), storage_uri: str = "", group: str = "") -> list:
    """The loggers a Tuner gets beside Tune's JSON and CSV ones: TensorBoard (none when the
    user turned Tune's loggers off, TUNE_DISABLE_AUTO_CALLBACK_LOGGERS=1), then those of
    `--logger` (W&B, MLflow: icl_core.running.wandb_mlflow), `group` naming the Tune run."""
    tensorboard = [] if os.environ.get("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS") == "1" \
        else [TrialHparams()]
    if not loggers:
        return tensorboard
    from icl_core.running.wandb_mlflow import logger_callbacks

    return tensorboard + logger_callbacks(loggers, storage_uri, group)
