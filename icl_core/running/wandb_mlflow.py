"""`--logger wandb|mlflow`: Weights & Biases and MLflow through Ray Tune's own integrations
(`ray.air.integrations.wandb.WandbLoggerCallback`, `ray.air.integrations.mlflow
.MLflowLoggerCallback`), optional extras (`pip install -e ".[wandb]"` / `".[mlflow]"`).

Both would log a trial's Tune config, which is one opaque JSON string (the trial format,
icl_core.running.tune_trainable); ours log instead the members' flattened configs (`model.depth`,
`train.lr`, ..., `config_hash`: icl_core.running.tune_trainable.trial_hparams), as TensorBoard's hparams do.
Metrics are Tune's reported results, step by step. The callbacks run on the driver; the rows
stay the results.

Where they write (defaults; the tools' own environment variables win):
- W&B: project $WANDB_PROJECT, else "icl-scaling"; one run per trial, grouped by the Tune run
  (`<sweep>` or `<sweep>/<study>`). `WANDB_MODE=offline` writes each run under its trial folder
  (`<trial>/wandb/offline-run-*`, `wandb sync` uploads it later); online needs WANDB_API_KEY or
  `wandb login`.
- MLflow: $MLFLOW_TRACKING_URI, else `sqlite:///<storage>/mlflow.db` beside the rows (MLflow 3
  keeps its file store in maintenance mode); the experiment is the sweep's name. A remote
  storage (s3://...) needs MLFLOW_TRACKING_URI. View it with `mlflow ui --backend-store-uri
  sqlite:///results/mlflow.db` (the UI needs the full `mlflow` package).

`check_loggers` is run before Ray starts: a missing package, a W&B without credentials or an
MLflow without a tracking store is one line (ConfigError), not a failure after launch.
"""

from __future__ import annotations

import importlib.util
import logging
import os

import pyarrow.fs as pafs
from ray.air.integrations.mlflow import MLflowLoggerCallback  # each imports its package
from ray.air.integrations.wandb import WandbLoggerCallback  # only if installed

from icl_core.common.validation import ConfigError
from icl_core.running.tune_trainable import trial_hparams
from icl_core.storage.store import redacted

logger = logging.getLogger(__name__)

WANDB_PROJECT = "icl-scaling"
MLFLOW_PARAM_CHARS = 6000  # MLflow rejects longer parameter values


def check_loggers(loggers, storage_uri: str) -> None:
    """Each requested logger can start: its package is installed and it has somewhere to
    write (ConfigError naming what to install or set)."""
    for name in loggers:
        if importlib.util.find_spec(name) is None:  # each named for its package
            raise ConfigError(f"--logger {name}: the {name!r} package is not installed "
                              f"(pip install -e \".[{name}]\")")
        if name == "wandb":
            _check_wandb_credentials()
        else:
            mlflow_uri(storage_uri)


def _check_wandb_credentials() -> None:
    """Offline/disabled mode, WANDB_API_KEY, or stored credentials (`wandb login`)."""
    if os.environ.get("WANDB_MODE") in ("offline", "disabled") or \
            os.environ.get("WANDB_API_KEY"):
        return
    import wandb

    try:
        stored = wandb.login(prompt=False)
    except Exception as exc:  # stored credentials the server refuses, or no server
        raise ConfigError(f"--logger wandb: {type(exc).__name__}: {exc}") from None
    if not stored:
        raise ConfigError("--logger wandb: no W&B credentials; set WANDB_API_KEY, run "
                          "`wandb login`, or set WANDB_MODE=offline (runs kept in each "
                          "trial's folder, `wandb sync` uploads them)")


def mlflow_uri(storage_uri: str) -> str:
    """$MLFLOW_TRACKING_URI, else an SQLite store beside the rows of a local storage."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    if "://" in storage_uri and not storage_uri.startswith("file://"):
        raise ConfigError(f"--logger mlflow: the storage {redacted(storage_uri)!r} is remote; set "
                          "MLFLOW_TRACKING_URI to an MLflow server or database")
    path = os.path.abspath(storage_uri.removeprefix("file://"))
    return f"sqlite:///{path}/mlflow.db"


def logger_callbacks(loggers, storage_uri: str, group: str) -> list:
    """The Tune callbacks of `--logger` (each checked by check_loggers first)."""
    out = []
    for name in loggers:
        if name == "wandb":
            import wandb

            mode = {"mode": os.environ["WANDB_MODE"]} if os.environ.get("WANDB_MODE") else {}
            project = os.environ.get("WANDB_PROJECT", WANDB_PROJECT)
            out.append(WandbHparams(project=project, group=group,
                                    settings=wandb.Settings(silent=True), **mode))
            where = "in each trial's folder (wandb sync <trial>/wandb/offline-run-*)" \
                if mode.get("mode") == "offline" else f"to project {project!r}"
            logger.info(f"[{group}] W&B: one run per trial, group {group!r}, {where}")
        else:
            uri, experiment = mlflow_uri(storage_uri), group.split("/")[0]
            logger.info(f"[{group}] MLflow: experiment {experiment!r} at {uri}")
            out.append(MlflowHparams(tracking_uri=uri, experiment_name=experiment,
                                     tags={"icl.group": group}))
    return out


class WandbHparams(WandbLoggerCallback):
    """Ray's W&B logger, whose run config is the members' flattened configs."""

    def _start_logging_actor(self, trial, exclude_results, **init_kwargs):
        init_kwargs["config"] = trial_hparams(trial.config)
        init_kwargs["reinit"] = "finish_previous"  # Ray passes True, which wandb deprecates
        if isinstance(trial.storage.storage_filesystem, pafs.LocalFileSystem):
            # into the trial's folder itself: Tune copies its local staging folder there at
            # the experiment's end, before the last runs are written (they were left empty)
            init_kwargs["dir"] = trial.path
        super()._start_logging_actor(trial, exclude_results, **init_kwargs)

    def log_trial_result(self, iteration, trial, result) -> None:
        # Ray's logging actor adds a result's "config" (the opaque spec) to the run config
        super().log_trial_result(iteration, trial, {k: v for k, v in result.items()
                                                    if k != "config"})


class MlflowHparams(MLflowLoggerCallback):
    """Ray's MLflow logger, whose run parameters are the members' flattened configs."""

    def log_trial_start(self, trial) -> None:
        if trial not in self._trial_runs:
            tags = {**self.tags, "trial_name": str(trial)}
            run = self.mlflow_util.start_run(tags=tags, run_name=str(trial))
            self._trial_runs[trial] = run.info.run_id
        params = {k: str(v)[:MLFLOW_PARAM_CHARS] for k, v in
                  trial_hparams(trial.config).items()}
        self.mlflow_util.log_params(run_id=self._trial_runs[trial], params_to_log=params)
