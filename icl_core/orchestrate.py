"""Orchestration: plans of a sweep file's studies and their runs on Ray Tune (or Optuna alone).

`make_plans` expands each study under a preset and the command line's options (every member
config validated before anything starts); `run_plans` starts or joins Ray and runs each plan:
a grid study's unfinished members packed into trials (`run_study`), a search's Optuna trials
(`run_search`), or searches without Ray (`run_standalone`, --optuna-journal). Each study
writes its manifest beside its rows first (`write_manifest`: what analysis needs of a study,
so analysis never imports this module), and finishes with its statuses reported and its
figure drawn (`report_statuses`). The command line (icl_core.cli) parses and reports only.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass

from icl_core.config import ConfigError, to_plain
from icl_core.flops import step_shape
from icl_core.search import Search
from icl_core.study import PRESETS
from icl_core.validation import unknown

# (flag, other flag, why they cannot go together): refused before anything starts
CONFLICTS = (
    ("optuna_journal", "address", "the journal runs searches without Ray"),
    ("optuna_journal", "resume", "a journal search resumes by running it again"),
)


MAX_SEARCH_SAMPLES = 10_000  # --num-samples of a search: Optuna trials per search


def parse_sets(pairs: list[str]) -> dict[str, str]:
    """`--set KEY=VALUE` pairs; a key given twice is refused (which one would win is a guess)."""
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"--set {pair!r}: expected KEY=VALUE")
        key, value = (part.strip() for part in pair.split("=", 1))
        if key in out:
            raise ConfigError(f"--set {key}: given twice ({out[key]!r} and {value!r}); "
                              "give each key once")
        out[key] = value
    return out


def check_options(sweep, args) -> None:
    """The options that need no study: ranges and combinations."""
    if args.max_concurrent is not None and args.max_concurrent < 1:
        raise ConfigError("--max-concurrent: must be >= 1")
    if args.pack != "auto" and (not isinstance(args.pack, int) or args.pack < 1):
        raise ConfigError(f"--pack: must be an integer >= 1 or auto, got {args.pack!r}")
    for flag, other, why in CONFLICTS:
        if getattr(args, flag) and getattr(args, other):
            raise ConfigError(f"--{flag.replace('_', '-')}: conflicts with "
                              f"--{other.replace('_', '-')} ({why})")
    if args.plan_gpus is not None and not args.dry_run:
        raise ConfigError("--plan-gpus: only plans; use it with --dry-run")
    if args.plan_gpus is not None and not 0 <= args.plan_gpus < math.inf:
        raise ConfigError(f"--plan-gpus: must be a number of GPUs >= 0, got {args.plan_gpus:g}")
    if args.preset not in PRESETS:
        raise unknown("--preset", "", args.preset, PRESETS)


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


def make_plans(sweep, args) -> list[Plan]:
    """Every chosen study's plan, each member validated; a ConfigError names the study."""
    check_options(sweep, args)
    sets = parse_sets(args.set)
    studies = [sweep.study(args.study)] if args.study else list(sweep.studies)
    searches = any(isinstance(s, Search) for s in studies)
    if args.optuna_journal and not searches:
        raise ConfigError("--optuna-journal: only searches use it; this file has none")
    if getattr(args, "seed", None) is not None and not searches:
        raise ConfigError("--seed: seeds an Optuna search's sampler, and no chosen study is a "
                          "search; a grid's seeds are --num-samples K (seeds 0..K-1)")
    if getattr(args, "seed", None) is None:
        args.seed = 0  # the sampler's default seed (None on the command line: not given)
    if args.num_samples is not None and searches and args.num_samples > MAX_SEARCH_SAMPLES:
        raise ConfigError(f"--num-samples: a search takes at most {MAX_SEARCH_SAMPLES} trials, "
                          f"got {args.num_samples}")
    plans = []
    for study in studies:
        try:
            if isinstance(study, Search):
                study = study.for_preset(args.preset)  # the preset's space entries
                points = study.points(args.preset, sets)
                plans.append(Plan(study, points,
                                  study.num_samples(args.preset, args.num_samples)))
            else:
                plans.append(Plan(study, study.members(args.preset, sets, args.num_samples)))
            for member in plans[-1].members:  # the planner can size it (never allocates)
                step_shape(member)
        except ConfigError as exc:
            where = "" if args.study else "; --study picks studies"
            raise ConfigError(f"{exc} (study {study.name!r}{where})") from None
    return plans


def cluster_gpus() -> float:
    import ray

    return float(ray.cluster_resources().get("GPU", 0)) if ray.is_initialized() else 0.0


def cluster_cpus() -> float:
    import ray

    if ray.is_initialized():
        return float(ray.cluster_resources().get("CPU", 1))
    return float(os.cpu_count() or 1)


def study_trials(plan: Plan, args, gpus: float, cpus: float, members=None) -> list:
    """The planned trials of a grid study: (members, resources) per trial."""
    from icl_core.resources import plan_trials

    return plan_trials(plan.members if members is None else members, gpus,
                       plan.study.cpus_per_trial, args.pack, cpus, args.stack)


def plan_gpu_seconds(plan: Plan) -> float:
    """The planner's wall-time estimate of a study on one H100-class GPU, stacked
    (icl_core.resources.estimate_gpu_seconds); a search counts every Optuna trial to its end."""
    from icl_core.resources import estimate_gpu_seconds

    if plan.is_search:  # trials differ in their sampled settings: none stack
        return plan.num_samples * sum(estimate_gpu_seconds([p]) for p in plan.members)
    return estimate_gpu_seconds(plan.members)


def run_plans(sweep, plans: list[Plan], store, args) -> int:
    """Start (or join) Ray, run every plan, stop the Ray this started; the exit status."""
    from icl_core.launch import init_ray
    from icl_core.provenance import driver_provenance

    started = init_ray(args.address)
    print(f"storage: {store.uri}", flush=True)
    provenance = driver_provenance()
    exit_code = 0
    try:
        for plan in plans:
            runner = run_search if plan.is_search else run_study
            try:
                exit_code |= runner(sweep, plan, store, provenance, args)
            except ConfigError as exc:
                print(f"error: {exc}", file=sys.stderr)
                exit_code |= 2
    finally:
        if started:
            import ray

            ray.shutdown()
    return exit_code


def study_manifest(sweep, study, presets=PRESETS, strict: bool = True) -> dict:
    """What analysis needs of a study, written beside its rows when it runs (read by
    analysis.regenerate, which never imports this module): its place in the sweep file, kind,
    figure and figure arguments, grid axes (a zipped axis as a list of keys), doc, and per
    preset the sorted config hashes of its plan ("expected"; grid studies only). `strict`:
    a preset that does not expand raises; otherwise it is recorded as None."""
    search = isinstance(study, Search)
    expected = {}
    for preset in presets if not search else ():
        try:
            expected[preset] = sorted(m.hash for m in study.members(preset))
        except ConfigError:
            if strict:
                raise
            expected[preset] = None
    return {
        "sweep": sweep.name, "study": study.name, "order": [s.name for s in sweep.studies].index(study.name),
        "kind": "search" if search else "grid", "figure": study.figure,
        "figure_args": to_plain(study.figure_args),
        "grid": [list(k) if isinstance(k, tuple) else k for k in study.grid],
        "doc": study.doc, "expected": expected,
    }


def write_manifest(store, sweep, study) -> None:
    """The study's manifest (every preset's plan) into the store, before it runs."""
    store.write_manifest(sweep.name, study.name, study_manifest(sweep, study, strict=False))


def run_study(sweep, plan: Plan, store, provenance, args) -> int:
    from icl_core.launch import run_tune
    from icl_core.trial import TrialSpec

    study, members = plan.study, plan.members
    label = f"{sweep.name}/{study.name}"
    write_manifest(store, sweep, study)
    done = store.finished(sweep.name, study.name)
    todo = [m for m in members if m.hash not in done]
    print(f"[{label}] {len(members)} configs, {len(members) - len(todo)} already finished, "
          f"running {len(todo)}", flush=True)
    if todo:
        specs = [
            TrialSpec(sweep.name, study.name, store.uri, [m.to_dict() for m in group],
                      threads=max(1, int(res.cpu)), gpu=res.gpu, provenance=provenance,
                      hashes=[m.hash for m in group], stack=args.stack)
            for group, res in study_trials(plan, args, cluster_gpus(), cluster_cpus(), todo)
        ]
        print(f"[{label}] {len(specs)} trials of up to {max(len(s.members) for s in specs)} "
              f"members (--pack {args.pack}, --stack {args.stack})", flush=True)
        tune_dir = f"{store.uri}/{sweep.name}/{study.name}/tune"
        run_tune(specs, label, tune_dir, args.max_concurrent)
    statuses = store.member_status(sweep.name, study.name, [m.hash for m in members])
    return report_statuses(label, statuses, sweep, study, store, args)


def report_statuses(label, statuses, sweep, study, store, args) -> int:
    kinds = ("ok", "diverged", "pruned", "failed", "missing")
    counts = {s: sum(1 for v in statuses.values() if v[0] == s) for s in kinds}
    print(f"[{label}] finished: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n or s != "pruned"),
          flush=True)
    for h, (status, reason) in statuses.items():
        if status in ("failed", "diverged", "missing"):
            print(f"[{label}]   {status} {h}: {reason}", flush=True)
    failed_figure = False
    if study.figure and not args.no_figures and counts["ok"]:
        from analysis.regenerate import regenerate

        try:
            regenerate(sweep.name, study.name, storage=store.uri, out=args.figures)
        except Exception as exc:  # the rows are stored; say what failed and how to retry
            failed_figure = True
            print(f"[{label}] figure failed ({type(exc).__name__}: {exc}); the rows are stored: "
                  f"python -m analysis.regenerate {sweep.name} --study {study.name} "
                  f"--storage {store.uri}", file=sys.stderr, flush=True)
    return 1 if counts["failed"] or counts["missing"] or failed_figure else 0


def search_template(sweep, plan, point, store, provenance, res):
    from icl_core.trial import TrialSpec

    return TrialSpec(sweep.name, plan.study.name, store.uri, [point.to_dict()],
                     threads=max(1, int(res.cpu)), gpu=res.gpu, provenance=provenance,
                     hashes=[point.hash], report_all=True)


def run_search(sweep, plan: Plan, store, provenance, args) -> int:
    from icl_core.resources import member_resources
    from icl_core.search import run_search_tune

    search = plan.study
    write_manifest(store, sweep, search)
    tune_dir = f"{store.uri}/{sweep.name}/{search.name}/tune"
    for point in plan.members:
        label = f"{sweep.name}/{search.name}@{point.hash[:8]}"
        print(f"[{label}] Optuna search: {plan.num_samples} trials", flush=True)
        res = member_resources(point, cluster_gpus(), search.cpus_per_trial)
        template = search_template(sweep, plan, point, store, provenance, res)
        run_search_tune(search, point, template, tune_dir, plan.num_samples, args.seed,
                        args.resume, args.max_concurrent, res, label)
    return summarize_search(sweep, search, store)


def summarize_search(sweep, search, store) -> int:
    hashes = sorted(store.finished(sweep.name, search.name))
    statuses = store.member_status(sweep.name, search.name, hashes)
    counts = {}
    for status, _ in statuses.values():
        counts[status] = counts.get(status, 0) + 1
    print(f"[{sweep.name}/{search.name}] stored trials: "
          + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())), flush=True)
    return 0


def run_standalone(sweep, plans, store, args) -> int:
    """--optuna-journal: plain Optuna in this process, no Ray."""
    from icl_core.provenance import driver_provenance
    from icl_core.search import run_search_optuna

    provenance = driver_provenance()
    searches = [plan for plan in plans if plan.is_search]
    for plan in searches:
        write_manifest(store, sweep, plan.study)
        runner = standalone_runner(sweep, plan, store, provenance)
        for point in plan.members:
            study = run_search_optuna(plan.study, point, args.optuna_journal, plan.num_samples,
                                      args.seed, runner)
            print(f"[{sweep.name}/{plan.study.name}@{point.hash[:8]}] best {study.best_value:.4g}"
                  f" with {study.best_params} (journal: {args.optuna_journal})", flush=True)
        summarize_search(sweep, plan.study, store)
    return 0


def standalone_runner(sweep, plan: Plan, store, provenance):
    """objective(member, optuna_trial) -> final training loss; prunes through trial.report."""
    import optuna

    from icl_core.resources import TrialResources
    from icl_core.trial import StopMember, run_trial_results

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
            return final_loss(store, sweep.name, name, member.hash)
        return result.final_loss

    return runner


def final_loss(store, sweep: str, study: str, config_hash: str) -> float:
    import pyarrow.parquet as pq

    with store.fs.open_input_file(store.rows_path(sweep, study, config_hash)) as f:
        table = pq.read_table(f, columns=["metric", "value", "step"]).to_pylist()
    losses = sorted((r["step"], r["value"]) for r in table if r["metric"] == "train_loss")
    return losses[-1][1]
