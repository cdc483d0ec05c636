"""Ray Tune execution: embedded local Ray by default, a cluster under `ray job submit`.

Trials are a grid over planned TrialSpecs in the one trial format (icl_core.running.tune_trainable: one
JSON string each, so every trial is self-contained). Progress: on a terminal one line redrawn in place
(a bar, at most once a second), elsewhere one timestamped line every 10 s (Progress).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from typing import Protocol

from ray import tune
from ray.tune import Callback

from icl_core.common.progress import span
from icl_core.running.tracking import tracking_callbacks
from icl_core.running.trial import TrialSpec
from icl_core.running.tune_trainable import (
    SPEC_KEY,
    ended_early,
    spec_from_config,
    tune_trainable,
)

logger = logging.getLogger(__name__)


class Interrupted(KeyboardInterrupt):
    """Ray Tune was stopped with Ctrl-C (SIGINT) before its trials ended. Tune catches the
    signal, saves its state and returns from fit(); this carries the stop on, so a command
    ends there (exit status 130) instead of going on to its next study. A KeyboardInterrupt:
    the `except Exception` that keeps the other studies going after one crashes lets it by."""

    exit_status = 130  # a shell's status for a command stopped by SIGINT (128 + 2)

    def __init__(self, label: str):
        super().__init__(f"[{label}] interrupted (Ctrl-C): what finished is stored; the same "
                         "command run again finishes the rest (with --resume where a search "
                         "was stopped)")


def fit(tuner, label: str):
    """tuner.fit() (its ResultGrid); raises Interrupted when Ctrl-C stopped it. While it runs,
    Tune's own SIGINT handler replaces the one before (in the main thread, unless
    TUNE_DISABLE_SIGINT_HANDLER); on Ctrl-C it puts the one before back (a second Ctrl-C
    skips Tune's last save) and fit() returns, every stopped trial marked TERMINATED as if it
    had finished. So the handler left in place says whether it fired: the one before is back
    after a stop, Tune's is still there after a run that ended (put back here, so that a
    Ctrl-C after the run is a KeyboardInterrupt again, not a flag nothing reads)."""
    main = threading.current_thread() is threading.main_thread()
    catches = main and not int(os.environ.get("TUNE_DISABLE_SIGINT_HANDLER") or 0)
    before = signal.getsignal(signal.SIGINT)
    results = tuner.fit()
    after = signal.getsignal(signal.SIGINT)
    if catches and after is before:
        raise Interrupted(label)
    if main and after is not before:
        signal.signal(signal.SIGINT, before)
    return results


class Pool(Protocol):
    """The studies of one Tune run (icl_core.running.trial_pool.StudyPool)."""

    total_seconds: float

    def seconds(self, config: dict) -> float: ...

    def trial_ended(self, config: dict) -> None: ...

    def counts(self) -> str: ...


def in_ray_job() -> bool:
    """True when this driver was started by `ray job submit`."""
    return bool(os.environ.get("RAY_JOB_SUBMISSION_ID") or os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR"))


def ray_logging_level(ours: int) -> int:
    """Ray's own log level for a local Ray this driver starts, from the commands' (--quiet,
    --verbose): its INFO lines ("Started a local Ray instance", the dashboard's address, which
    `dashboard_line` prints once) only with --verbose; its warnings otherwise."""
    return logging.INFO if ours <= logging.DEBUG else logging.WARNING


def quiet_startup() -> int:
    """The commands' level; with --quiet, Ray's notice that token authentication is on (a local
    Ray's default here, nothing to act on) is left out too."""
    ours = logging.getLogger("icl_core").getEffectiveLevel()
    if ours >= logging.WARNING:
        logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(
            logging.ERROR)
    return ours


def init_ray(address: str | None, dashboard: bool = True) -> bool:
    """Connect or start Ray; returns True if this call started it (and should stop it). An
    embedded local Ray serves its dashboard on 127.0.0.1 only, unless `dashboard` is False;
    with `dashboard`, the address of the dashboard of the Ray started or joined (a cluster's,
    a notebook's) is printed once (`dashboard_line`)."""
    import ray

    started = not ray.is_initialized()
    if started and address:
        ray.init(address=address)
    elif started and in_ray_job():
        ray.init()  # the job's cluster
    elif started:
        # address="local": never join a stray running cluster by accident. include_dashboard
        # None: the dashboard starts where its packages are (ray[default]); one that fails to
        # start is Ray's warning, not a failed run
        ray.init(address="local", include_dashboard=None if dashboard else False,
                 dashboard_host="127.0.0.1", log_to_driver=True,
                 logging_level=ray_logging_level(quiet_startup()))
    line = dashboard_line() if dashboard else None
    if line:
        logger.info(line)
    return started


def dashboard_line() -> str | None:
    """"dashboard: http://127.0.0.1:8265" for the Ray this driver is connected to, or None
    where it serves none. Under token authentication (RAY_AUTH_MODE=token: Ray 2.60 sets it for
    a new local cluster) the page asks for the token once: the line says where it is."""
    try:  # what ray.init's RayContext.dashboard_url is read from, also for a Ray joined before
        from ray._private.worker import get_dashboard_url

        url = get_dashboard_url()
    except Exception:  # an older or newer Ray without it: no line, the run goes on
        return None
    if not url:
        return None
    line = f"dashboard: {url if '://' in url else 'http://' + url}"
    if os.environ.get("RAY_AUTH_MODE", "").lower() == "token":
        line += " (token authentication: paste what `ray get-auth-token` prints when it asks)"
    return line


LIVE_EVERY_S = 1.0  # on a terminal the line is redrawn at most once a second


class StoppedRecords(Callback):
    """Tune callback of a search: a trial its scheduler stopped (ASHA) ends in a process that
    writes nothing, so the driver records its member `pruned` (icl_core.running.trial.
    record_stopped), with the step and loss of its last report; a trial that ran to its end
    reported `member_done` after writing its own rows."""

    def on_trial_complete(self, iteration, trials, trial, **info):
        result = trial.last_result
        if not ended_early(result):
            return
        from icl_core.running.trial import record_stopped

        step, loss = int(result.get("step", 0)), float(result.get("loss", float("nan")))
        spec = spec_from_config(trial.config)
        if record_stopped(spec, step, loss, f"stopped by the search's scheduler (ASHA) at step "
                                            f"{step}, training loss {loss:.4g}"):
            logger.info(f"[{spec.sweep}/{spec.study}] {spec.hashes[0]}: stopped by ASHA at step "
                        f"{step}; recorded pruned")


class Progress(Callback):
    """Tune callback: done / running / failed / diverged / restarted and an ETA weighted by the
    planned seconds (the pool's cost model), rate-limited. On a terminal (`live`, default:
    whether stdout is one) one line redrawn in place, a bar filled by the planned cost done
    (icl_core.common.progress); elsewhere (a log file, CI, `ray job logs`) one line every
    `every_s` seconds, timestamped."""

    # defaults on the class: a callback pickled before these existed (a search's Tuner state,
    # unpickled by --resume) still has them
    live: bool | None = None
    line = None

    def __init__(self, label: str, total: int, every_s: float = 10.0, pool: Pool | None = None,
                 live: bool | None = None):
        self.label, self.total, self.every_s = label, total, every_s
        self.pool = pool
        self.live = live
        self.line = None  # the terminal's LiveLine while a run draws on it
        self.setup()

    def __getstate__(self):
        """Tune pickles its callbacks with the Tuner: never the terminal's line."""
        return {**self.__dict__, "line": None}

    def setup(self, **info):
        """The counts, zero at each fit(): Tuner.restore unpickles this callback as it was
        when the first run started, and a restored run counts its own time from now."""
        self.start = time.time()
        self.last = 0.0
        self.done = self.failed = self.diverged = self.restarts = 0
        self.running: set = set()
        self.diverged_in: dict = {}  # trial id -> members of it that diverged
        self.progress: dict = {}  # trial id -> share of its work done (0-1)
        self.weight: dict = {}  # trial id -> its planned seconds (1 each without a pool)
        self.resumed = False  # whether the trials a restored run had ended are counted
        self.before = 0.0  # their work: the ETA's rate is this run's own

    def on_step_begin(self, iteration, trials, **info):
        """The first step of a run: trials ended before it (a restored run's) count as done,
        or failed, so the counts reach the total and the ETA weighs only what is left."""
        if self.resumed:
            return
        self.resumed = True
        for trial in trials:
            if trial.status in ("TERMINATED", "ERROR") and trial.trial_id not in self.progress:
                self.before += self._weight(trial)
                self.progress[trial.trial_id] = 1.0
                if trial.status == "TERMINATED":
                    self.done += 1
                else:
                    self.failed += 1

    def _weight(self, trial) -> float:
        if trial.trial_id not in self.weight:
            self.weight[trial.trial_id] = self.pool.seconds(trial.config) if self.pool else 1.0
        return self.weight[trial.trial_id]

    def _ended(self, trial) -> None:
        self.running.discard(trial.trial_id)
        self.progress[trial.trial_id] = 1.0
        if self.pool is not None:
            self.pool.trial_ended(trial.config)

    def on_trial_start(self, iteration, trials, trial, **info):
        self.running.add(trial.trial_id)
        self._weight(trial)
        self._print()

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if "diverged_members" in result:  # cumulative per trial: no report may be missed
            self.diverged_in[trial.trial_id] = result["diverged_members"]
            self.diverged = sum(self.diverged_in.values())
        if "progress" in result:
            self.progress[trial.trial_id] = result["progress"]
        self._print()

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.done += 1
        self._ended(trial)  # first, so the line printed counts this trial's work as done
        self._print(force=self.done == self.total)

    def on_trial_recover(self, iteration, trials, trial, **info):
        """A trial's worker died; Tune restarts it (FailureConfig), its members from their last
        checkpoints in the store (icl_core.running.store_checkpoints)."""
        self.restarts += 1
        self.running.discard(trial.trial_id)  # pending again until its restart begins
        self._print(force=True)

    def on_trial_error(self, iteration, trials, trial, **info):
        self.failed += 1
        self._ended(trial)
        self._print(force=True)

    def on_experiment_end(self, trials, **info):
        self.close()

    def close(self) -> None:
        """The terminal's line drawn once more, as it ends, and left on screen; stdout back."""
        if self.line is not None:
            self._print(force=True)
            self.line.close()
            self.line = None

    def _is_live(self) -> bool:
        if self.live is not None:
            return self.live
        isatty = getattr(sys.stdout, "isatty", None)
        return bool(isatty and isatty())

    def work(self) -> tuple[float, float]:
        """(work done, total work): planned seconds with a pool, else trials; a trial's work
        done is its share reported so far times its weight."""
        if self.pool is not None:
            return (sum(p * self.weight.get(t, 0.0) for t, p in self.progress.items()),
                    self.pool.total_seconds)
        return sum(self.progress.values()), float(self.total)

    def _print(self, force: bool = False):
        if not logger.isEnabledFor(logging.INFO):  # --quiet: neither the bar nor the lines
            return
        now = time.time()
        live = self._is_live()
        if not force and now - self.last < (LIVE_EVERY_S if live else self.every_s):
            return
        self.last = now
        elapsed = now - self.start
        work, total_work = self.work()
        # the ETA: this run's own rate (work since it began, not a restored run's) on what is left
        left, work_here = max(0.0, total_work - work), work - self.before
        eta = elapsed / work_here * left if work_here > 0.01 * total_work else None
        if live:
            self._draw(work, total_work, elapsed, eta)
            return
        studies = self.pool.counts() if self.pool is not None else ""
        logger.info(
            f"{time.strftime('%H:%M:%S')} [{self.label}] {self.done}/{self.total} trials done, "
            f"{len(self.running)} running, {self.failed} failed, {self.diverged} members "
            "diverged, " + (f"{self.restarts} restarted from a checkpoint, " if self.restarts
                            else "")
            + studies + f"elapsed {span(elapsed)}, ETA {'?' if eta is None else span(eta)}")

    def _draw(self, work: float, total_work: float, elapsed: float, eta: float | None) -> None:
        """The terminal's line: [label] bar, share of the planned cost done, trials, times,
        then what is running, failed, diverged, restarted and the studies' counts."""
        import shutil

        from icl_core.common.progress import LiveLine, progress_bar

        if self.line is None:
            self.line = LiveLine(sys.stdout).open()
        counts = [f"{len(self.running)} running"] + [
            f"{n} {what}" for n, what in ((self.failed, "failed"),
                                          (self.diverged, "members diverged"),
                                          (self.restarts, "restarted")) if n]
        studies = self.pool.counts().rstrip(", ") if self.pool is not None else ""
        prefix = f"[{self.label}] "
        width = shutil.get_terminal_size((100, 24)).columns - 1 - len(prefix)
        self.line.draw(prefix + progress_bar(
            work, total_work, width, trials=(self.done, self.total), elapsed_s=elapsed,
            eta_s=eta, note=", ".join(counts + ([studies] if studies else []))))


def quiet() -> None:
    """Our progress line replaces Tune's tables. Tune's loggers stay on (result.json,
    progress.csv, TensorBoard: icl_core.running.tracking), unless TUNE_DISABLE_AUTO_CALLBACK_LOGGERS=1."""
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    for name in ("ray.tune.analysis.experiment_analysis", "ray.tune.tune"):
        logging.getLogger(name).setLevel(logging.ERROR)


def trial_resources(config: dict) -> tune.PlacementGroupFactory:
    """Resources of one trial, read from its own spec (set by icl_core.planning.resources)."""
    spec = spec_from_config(config)
    bundle = {"CPU": spec.threads, "GPU": spec.gpu} if spec.gpu else {"CPU": spec.threads}
    return tune.PlacementGroupFactory([bundle])


def run_tune(specs: list[TrialSpec], label: str, tune_dir: str, max_concurrent: int | None,
             pool: Pool | None = None, loggers=()) -> Progress:
    """Run the trials with Ray Tune, in the order given (Tune starts pending trials in order:
    a pool lists the longest first); failures are recorded in rows, not raised here. `pool`:
    the studies the trials belong to (per-study counts, each study's report as soon as its
    own trials are done); `loggers`: --logger (icl_core.running.tracking). Returns the progress
    counts (done, failed, diverged, restarts); raises Interrupted after Ctrl-C."""
    quiet()
    trainable = tune.with_resources(tune_trainable, trial_resources)
    name = time.strftime("run-%Y%m%d-%H%M%S")
    progress = Progress(label, len(specs), pool=pool)
    tuner = tune.Tuner(
        trainable,
        param_space={SPEC_KEY: tune.grid_search([s.to_json() for s in specs])},  # trial_config
        tune_config=tune.TuneConfig(
            max_concurrent_trials=max_concurrent,
            # a trial worker runs trial after trial of the same resources: imports and the
            # worker's start are paid once per worker, not per trial (run_trial keeps no
            # state between trials: it sets threads, seeds and device for each)
            reuse_actors=True,
            trial_dirname_creator=lambda trial: f"{trial.trial_id}",
        ),
        run_config=tune.RunConfig(
            name=name,
            storage_path=tune_dir,
            failure_config=tune.FailureConfig(max_failures=2),  # checkpoints: in the store
            callbacks=[progress, *tracking_callbacks(loggers, specs[0].storage, label)],
            verbose=0,
        ),
    )
    try:
        with snapshot_period(GRID_SNAPSHOT_S):
            fit(tuner, label)
    finally:
        progress.close()  # Tune ends it on its own way out, unless a second Ctrl-C cut that
    sys.stdout.flush()
    return progress


# Tune snapshots its whole experiment state (every trial's spec, as JSON) at least every 10 s
# ("auto"); for thousands of tiny members that was a third of the driver's time. A grid's
# resume reads the store (finished members are skipped), never this snapshot, so a grid run
# takes one a minute (TUNE_GLOBAL_CHECKPOINT_S, when not set by the user); searches keep
# Tune's own period (icl_core.running.search: their searcher's state is in it).
GRID_SNAPSHOT_S = "60"


@contextlib.contextmanager
def snapshot_period(seconds: str):
    """TUNE_GLOBAL_CHECKPOINT_S = seconds while the block runs (unless already set)."""
    key = "TUNE_GLOBAL_CHECKPOINT_S"
    if key in os.environ:
        yield
        return
    os.environ[key] = seconds
    try:
        yield
    finally:
        os.environ.pop(key, None)
