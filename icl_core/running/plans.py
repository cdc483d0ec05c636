"""Orchestration: plans of a sweep file's studies and their runs on Ray Tune (or Optuna alone).

`make_plans` expands each study under a preset and the command line's options (every member
config validated before anything starts); `run_plans` starts or joins Ray and runs the plans
of one or several sweep files: every grid study's unfinished members in one pool of
cost-balanced trials (icl_core.running.trial_pool), then each search's Optuna trials (`run_search`); or
searches without Ray (`run_standalone`, --optuna-journal). Each study
writes its manifest beside its rows first and finishes with its statuses reported and its
figure drawn (icl_core.running.study_report). The command line (icl.cli) parses and reports only.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field

from icl_core.common.validation import unknown
from icl_core.planning.memory import check_memory
from icl_core.running.study_report import write_manifest
from icl_core.running.trial_pool import cluster_gpus
from icl_core.spec.config import ConfigError
from icl_core.spec.search import Search
from icl_core.spec.study import PRESETS
from icl_core.storage.store import uri_join
from icl_core.training.flops import step_shape

logger = logging.getLogger(__name__)

# (flag, other flag, why they cannot go together): refused before anything starts
CONFLICTS = (
    ("optuna_journal", "address", "the journal runs searches without Ray"),
    ("optuna_journal", "resume", "a journal search resumes by running it again"),
)


MAX_SEARCH_SAMPLES = 10_000  # --num-samples of a search: Optuna trials per search


def parse_sets(pairs: list[str], flag: str = "--set", form: str = "KEY=VALUE") -> dict[str, str]:
    """`--set KEY=VALUE` pairs; a key given twice is refused (which one would win is a guess)."""
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"{flag} {pair!r}: expected {form}")
        key, value = (part.strip() for part in pair.split("=", 1))
        if key in out:
            raise ConfigError(f"{flag} {key}: given twice ({out[key]!r} and {value!r}); "
                              "give each key once")
        out[key] = value
    return out


def parse_sweeps(pairs: list[str]) -> dict[str, str]:
    """`--sweep KEY=V1,V2,...` (or KEY=LO..HI:log:N) pairs, as parse_sets takes --set's; the
    values are parsed against the study (icl_core.spec.study.parse_axis)."""
    return parse_sets(pairs, "--sweep", "KEY=V1,V2,... or KEY=LO..HI:log:N")


def check_options(sweep, request: PlanRequest) -> None:
    """The options that need no study: ranges and combinations."""
    if request.max_concurrent is not None and request.max_concurrent < 1:
        raise ConfigError("--max-concurrent: must be >= 1")
    if request.pack not in ("auto", "gpu") and (not isinstance(request.pack, int)
                                                or request.pack < 1):
        raise ConfigError(f"--pack: must be an integer >= 1, auto or gpu, got {request.pack!r}")
    for flag, other, why in CONFLICTS:
        if getattr(request, flag) and getattr(request, other):
            raise ConfigError(f"--{flag.replace('_', '-')}: conflicts with "
                              f"--{other.replace('_', '-')} ({why})")
    if request.plan_gpus is not None and not request.dry_run:
        raise ConfigError("--plan-gpus: only plans; use it with --dry-run")
    if request.plan_gpus is not None and not 0 <= request.plan_gpus < math.inf:
        raise ConfigError(f"--plan-gpus: must be a number of GPUs >= 0, got {request.plan_gpus:g}")
    if request.preset not in PRESETS:
        raise unknown("--preset", "", request.preset, PRESETS)


@dataclass(frozen=True)
class PlanRequest:
    """What `make_plans` expands, typed: the face builds it from its options (icl.api.Options)
    and nothing below writes to it."""

    preset: str = "cpu"
    study: str | None = None  # one study, else every study of the file
    sets: tuple[str, ...] = ()  # "KEY=VALUE" overrides
    sweeps: tuple[str, ...] = ()  # "KEY=V1,V2,..." or "KEY=LO..HI:log:N" axes
    num_samples: int | None = None  # grids: seeds 0..K-1; searches: trials per search
    seed: int | None = None  # a search's sampler seed (None: not given)
    optuna_journal: str | None = None
    max_concurrent: int | None = None
    pack: int | str = "auto"
    plan_gpus: float | None = None
    dry_run: bool = False
    address: str | None = None
    resume: bool = False


@dataclass(frozen=True)
class Launch:
    """How `run_plans` runs plans, typed (the face's options, read once): where Ray is, how
    trials are packed and stacked, the searches' sampler seed and resumption, trackers."""

    address: str | None = None
    dashboard: bool = True
    max_concurrent: int | None = None
    pack: int | str = "auto"
    stack: str = "auto"
    trial_minutes: float | None = None  # --pack auto: a trial's planned duration
    seed: int = 0  # the searches' sampler seed
    resume: bool = False
    loggers: tuple[str, ...] = ()  # "wandb", "mlflow"
    optuna_journal: str | None = None  # searches without Ray
    figures: str | None = None  # where figures go (said as the run starts; drawn by `draw`)

    def __post_init__(self):
        minutes = self.trial_minutes
        if minutes is not None and not 0 < minutes < math.inf:
            raise ConfigError(f"--trial-minutes: must be a number of minutes > 0, got {minutes:g}")

    @property
    def target_s(self) -> float | None:
        return self.trial_minutes * 60 if self.trial_minutes else None


@dataclass
class RunReport:
    """What `run_plans` returns: the exit status and each grid study's outcome by its label
    (icl_core.running.study_report.StudyOutcome), for the face's summary."""

    exit_status: int = 0
    outcomes: dict = field(default_factory=dict)


@dataclass
class Plan:
    study: object  # Study or Search
    members: list  # grid: every member; search: the base member of each search
    num_samples: int = 0  # searches only

    @property
    def is_search(self) -> bool:
        return isinstance(self.study, Search)

    @property
    def trials(self) -> int:
        return len(self.members) * self.num_samples if self.is_search else len(self.members)


def chosen_studies(sweep, study: str | None, preset: str) -> list:
    """The studies a run plans: `study`, or every study of the file; an optional preset
    (`reduced`) picks the studies that have it, and a study without it is an error naming
    those that do."""
    studies = [sweep.study(study)] if study else list(sweep.studies)
    having = [s for s in studies if preset in s.presets]
    if having:
        return having
    others = [s.name for s in sweep.studies if preset in s.presets]
    where = (f"studies with one: {', '.join(others)}" if others
             else f"no study of {sweep.name} has one")
    label = f"study {study!r}" if study else f"sweep {sweep.name!r}"
    raise ConfigError(f"--preset: {label} has no {preset!r} preset ({where})")


def make_plans(sweep, request: PlanRequest) -> list[Plan]:
    """Every chosen study's plan, each member validated; a ConfigError names the study."""
    check_options(sweep, request)
    sets, sweeps = parse_sets(list(request.sets)), parse_sweeps(list(request.sweeps))
    studies = chosen_studies(sweep, request.study, request.preset)
    searches = any(isinstance(s, Search) for s in studies)
    if request.optuna_journal and not searches:
        raise ConfigError("--optuna-journal: only searches use it; this file has none")
    if request.seed is not None and not searches:
        raise ConfigError("--seed: seeds an Optuna search's sampler, and no chosen study is a "
                          "search; a grid's seeds are --num-samples K (seeds 0..K-1)")
    if request.num_samples is not None and searches and request.num_samples > MAX_SEARCH_SAMPLES:
        raise ConfigError(f"--num-samples: a search takes at most {MAX_SEARCH_SAMPLES} trials, "
                          f"got {request.num_samples}")
    plans = []
    for study in studies:
        try:
            if isinstance(study, Search):
                if sweeps:
                    raise ConfigError("--sweep: a search's space is searched, not swept; "
                                      "use --set")
                study = study.for_preset(request.preset)  # the preset's space entries
                points = study.points(request.preset, sets)
                plans.append(Plan(study, points,
                                  study.num_samples(request.preset, request.num_samples)))
            else:
                plans.append(Plan(study, study.members(request.preset, sets, request.num_samples,
                                                       sweeps)))
            for member in plans[-1].members:  # the planner can size it (never allocates)
                step_shape(member)
        except ConfigError as exc:
            where = "" if request.study else "; --study picks studies"
            raise ConfigError(f"{exc} (study {study.name!r}{where})") from None
        check_memory(f"{sweep.name}/{study.name}", plans[-1].members,
                     planned_gpus(request.plan_gpus), cluster=joins_cluster(request.dry_run, request.address))
    if request.pack == "gpu" and planned_gpus(request.plan_gpus) < 1 and \
            not joins_cluster(request.dry_run, request.address):
        raise ConfigError("--pack gpu: fills a whole GPU a trial, and this machine has none "
                          "(plan for a cluster with --plan-gpus N --dry-run, or join one with "
                          "--address; valid --pack choices here: an integer, auto)")
    return plans


def joins_cluster(dry_run: bool, address: str | None) -> bool:
    """A launch that joins a cluster (--address, or under `ray job submit`) whose nodes are not
    known before Ray: not a dry run, which plans for --plan-gpus or this machine."""
    from icl_core.running.ray_launch import in_ray_job

    return not dry_run and bool(address or in_ray_job())


def planned_gpus(plan_gpus: float | None) -> float:
    """The GPUs a plan is for: --plan-gpus, else this machine's."""
    import torch

    return plan_gpus if plan_gpus is not None else float(torch.cuda.device_count())


def plan_gpu_seconds(plan: Plan, model=None) -> float:
    """A study's wall time on one GPU by the cost model (icl_core.planning.resources.gpu_seconds;
    `model`: a GPU's CostModel, default the cluster GPU's cached calibrations, else the H100
    rate model); a search counts every Optuna trial to its end."""
    from icl_core.planning.resources import gpu_seconds
    from icl_core.running.trial_pool import cost_model

    model = model or cost_model(1.0, max(1, int(plan.study.cpus_per_trial)))
    if plan.is_search:  # trials differ in their sampled settings: none stack
        return plan.num_samples * sum(gpu_seconds([p], model) for p in plan.members)
    return gpu_seconds(plan.members, model)


def run_plans(files: list[tuple], store, launch: Launch, label: str | None = None,
              draw=None) -> RunReport:
    """Start (or join) Ray; run the grid studies of every (sweep, plans) pair in `files` as one
    pool (icl_core.running.trial_pool), then the searches; stop the Ray this started; the
    RunReport: the exit status (130 after Ctrl-C: what ran so far is reported and nothing more
    starts) and each grid study's outcome. A
    storage the cluster's nodes cannot share raises a ConfigError. `draw(sweep, study,
    storage_uri) -> [paths]`: a study's figures, drawn as it ends (the face's; the core draws
    none); None for no figures."""
    from icl_core.running.ray_launch import Interrupted, init_ray
    from icl_core.running.trial_pool import run_pool
    from icl_core.storage.provenance import driver_provenance

    started = init_ray(launch.address, dashboard=launch.dashboard)
    logger.info(f"storage: {store.redacted}")
    if draw is not None:
        logger.info(f"figures: {os.path.abspath(launch.figures or 'figures')}")
    provenance = driver_provenance()
    try:
        check_storage_reach(store.uri, node_hosts())
    except ConfigError:  # raised to the caller (one line, exit 2), with the Ray this started stopped
        if started:
            import ray

            ray.shutdown()
        raise
    grids = [(sweep, p) for sweep, plans in files for p in plans if not p.is_search]
    label = label or files[0][0].name
    tune_dir = uri_join(store.uri, files[0][0].name if len(files) == 1 else "_pool", "tune")
    exit_code, outcomes = 0, {}
    try:
        if grids:
            try:
                status, outcomes = run_pool(grids, store, provenance, launch, label, tune_dir,
                                            draw)
                exit_code |= status
            except ConfigError as exc:  # e.g. a member that fails its calibration: one line
                logger.error(f"error: {exc}")
                exit_code |= 2
            except Exception as exc:  # reported; the searches still run
                exit_code |= study_crashed(label, exc)
        for sweep, plans in files:
            for plan in (p for p in plans if p.is_search):
                try:
                    exit_code |= run_search(sweep, plan, store, provenance, launch)
                except ConfigError as exc:
                    logger.error(f"error: {exc}")
                    exit_code |= 2
                except Exception as exc:  # reported; the other studies still run
                    exit_code |= study_crashed(f"{sweep.name}/{plan.study.name}", exc)
    except Interrupted as exc:  # Ctrl-C: no study after this one starts
        logger.warning(exc)
        exit_code = exc.exit_status
    finally:
        if started:
            import ray

            ray.shutdown()
    return RunReport(exit_code, outcomes)


SHARED_FS = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "beegfs", "ceph",
             "cephfs", "glusterfs", "wekafs", "fuse.")  # fuse.*: gcsfuse, s3fs, juicefs, ...


def node_hosts() -> set[str]:
    """The addresses of the Ray cluster's alive nodes."""
    import ray

    return {n["NodeManagerAddress"] for n in ray.nodes() if n.get("Alive")}


def filesystem_type(path: str) -> str:
    """The type of the filesystem holding `path` (the longest /proc/mounts prefix), or ''."""
    best, kind = "", ""
    try:
        mounts = open("/proc/mounts").read().splitlines()
    except OSError:
        return ""
    for line in mounts:
        parts = line.split()
        if len(parts) >= 3:
            point = parts[1].replace("\\040", " ")
            if (path == point or path.startswith(point.rstrip("/") + "/")) and len(point) > len(best):
                best, kind = point, parts[2]
    return kind


def check_storage_reach(uri: str, hosts: set[str], fstype: str | None = None) -> None:
    """On a cluster of several hosts every worker writes rows: a path on a node-local
    filesystem would scatter them over the nodes, so it is refused before launch (a shared
    filesystem or an s3:// / gs:// URI is needed). One host (a laptop, a single node, a
    cluster simulated on one machine) takes any path."""
    if "://" in uri or len(hosts) < 2:
        return
    kind = filesystem_type(uri) if fstype is None else fstype
    if not any(kind == s or (s.endswith(".") and kind.startswith(s)) for s in SHARED_FS):
        raise ConfigError(
            f"--storage: {uri} is on a node-local filesystem ({kind or 'unknown'}) but the "
            f"cluster has {len(hosts)} hosts; use a shared filesystem (NFS, Lustre, ...) "
            "mounted on every node, or an s3:// / gs:// URI")


def study_crashed(label: str, exc: Exception) -> int:
    """An unexpected error of one study: its traceback and one line naming it; exit status 1."""
    logger.error(f"error: [{label}] {type(exc).__name__}: {exc}; the other studies go on",
                 exc_info=exc)
    return 1


def search_template(sweep, plan, point, store, provenance, res):
    from icl_core.running.trial import TrialSpec

    return TrialSpec(sweep.name, plan.study.name, store.uri, [point.to_dict()],
                     threads=max(1, int(res.cpu)), gpu=res.gpu, provenance=provenance,
                     hashes=[point.hash], report_all=True)


def run_search(sweep, plan: Plan, store, provenance, launch: Launch) -> int:
    from icl_core.planning.resources import member_resources
    from icl_core.running.search import run_search_tune

    search = plan.study
    write_manifest(store, sweep, search)
    tune_dir = uri_join(store.uri, sweep.name, search.name, "tune")
    for point in plan.members:
        label = f"{sweep.name}/{search.name}@{point.hash[:8]}"
        logger.info(f"[{label}] Optuna search: {plan.num_samples} trials")
        res = member_resources(point, cluster_gpus(), search.cpus_per_trial)
        template = search_template(sweep, plan, point, store, provenance, res)
        run_search_tune(search, point, template, tune_dir, plan.num_samples, launch.seed,
                        launch.resume, launch.max_concurrent, res, label, list(launch.loggers))
    return summarize_search(sweep, search, store)


def summarize_search(sweep, search, store) -> int:
    statuses = store.statuses(sweep.name, search.name)  # each row file read once
    counts = {}
    for status, _ in statuses.values():
        counts[status] = counts.get(status, 0) + 1
    logger.info(f"[{sweep.name}/{search.name}] stored trials: "
                + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    return 0


def run_standalone(sweep, plans, store, launch: Launch) -> int:
    """--optuna-journal: plain Optuna in this process, no Ray."""
    from icl_core.running.search import run_search_optuna
    from icl_core.storage.provenance import driver_provenance
    from icl_core.storage.store import redacted

    provenance = driver_provenance()
    searches = [plan for plan in plans if plan.is_search]
    for plan in searches:
        write_manifest(store, sweep, plan.study)
        runner = standalone_runner(sweep, plan, store, provenance)
        for point in plan.members:
            study = run_search_optuna(plan.study, point, launch.optuna_journal,
                                      plan.num_samples, launch.seed, runner, sweep=sweep.name)
            logger.info(f"[{sweep.name}/{plan.study.name}@{point.hash[:8]}] best "
                        f"{study.best_value:.4g} with {study.best_params} (journal: "
                        f"{redacted(launch.optuna_journal)})")
        summarize_search(sweep, plan.study, store)
    return 0


def standalone_runner(sweep, plan: Plan, store, provenance):
    """objective(member, optuna_trial) -> final training loss; prunes through trial.report."""
    import optuna

    from icl_core.planning.resources import TrialResources
    from icl_core.running.trial import StopMember, run_trial_results

    name = plan.study.name
    res = TrialResources(cpu=plan.study.cpus_per_trial, gpu=0.0)

    def runner(member, trial) -> float:
        spec = search_template(sweep, plan, member, store, provenance, res)

        def report(metrics, _state):
            if not metrics.get("member_done") and math.isfinite(metrics.get("loss", math.nan)):
                trial.report(metrics["loss"], metrics["step"])
                if trial.should_prune():
                    raise StopMember(f"pruned by Optuna at step {metrics['step']}")

        result = run_trial_results(spec, report)[member.hash]
        if result.status == "pruned":
            raise optuna.TrialPruned(result.reason)
        if result.status != "ok":
            raise RuntimeError(f"{member.hash}: {result.status}: {result.reason}")
        if result.final_loss is None:  # the same config finished in an earlier trial
            return store.final_train_loss(sweep.name, name, member.hash)[1]
        return result.final_loss

    return runner
