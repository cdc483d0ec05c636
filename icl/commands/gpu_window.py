"""`icl plan --gpu-minutes M`: which studies one GPU can run in a lent window of M minutes,
the undecided verdicts' studies first, and the one prepared command that runs them there.

    icl plan --gpu-minutes 10 [--preset reduced] [--only SWEEP[/STUDY] ...] [--seeds N] [--all]
        [--graph] [--call-minutes C]

Each grid study of the preset (a search needs Ray and Optuna, which the lent machine lacks) is
costed on one GPU by the cost model: its seeds stacked, as benchmarks/run_without_ray.py runs
them there, each stack's seconds alone (unmeasured shapes by the GPU rate model fitted to an
H100's steps, `icl cost`), and the window's wall is what the command runs: up to
SIDE_BY_SIDE processes side by side, each stack then at the measured slowdown
(`window_seconds`). Studies are taken in order while that wall (less `STARTUP_S`, and with
`--graph` the replay tests' `GATE_S`) fits the window: first those whose claims the verdict
engine leaves undecided on the committed evidence (partly, not testable at this scale,
evidence pending), the most such claims per planned second first; then those behind decided
claims, then the rest, cheaper first. `--seeds N` plans N seeds per setting in place of the
preset's (a number fixed before the run, never raised after seeing one). `--all` plans every
member, committed or not (the studies afresh, `ALL=1` for the script), and prints the planned
wall of every selected study in one window. `--graph` plans each member whose config allows it
with its step captured as a CUDA graph (icl_core.spec.config.on_graph_path: the same member,
hash and random stream, so its rows join the evidence as an eager window's do) and prints the
command with `GRAPH=1`. Until a window's steps fit the graph path (`icl cost`), its steps are
costed as the eager path's: the plan is an upper bound.

It prints one line per study (claims it serves, members, planned seconds) and the command:
benchmarks/gpu_evidence.sh with the chosen jobs and the window as its time limit; its rows go to
`icl evidence` and `icl verdicts --write` afterwards (the script's header says how).
`--call-minutes C` is for a machine that runs one command for at most C minutes (a lent GPU
machine: 10; a batch queue's time limit): the window becomes calls of at most C minutes, one
after another, each its own command, time limit and store (`calls`); a study runs whole in one
call. M is the commands' time: a lent machine's own start (minutes) is not in it. Where the
folder it runs in (the checkout's root) holds `WINDOW_STATES`, the unfinished members' states an
earlier window brought back, the command takes them (`STATES=`; name `.window` in the call's
carry) and its cut members go on from there.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field
from pathlib import Path

from icl_core.planning.cost import SIDE_BY_SIDE
from icl_core.planning.resources import longest_first, on_share

# of each call: the processes' imports and first CUDA calls, and the 20 s gpu_evidence.sh keeps
# for its archive (ARCHIVE_S) before its LIMIT
STARTUP_S = 50.0
# a command's LIMIT ends this long before its call does (the shell's own start, a clock's
# rounding): a machine that ends a command at its limit then never cuts the archive
MARGIN_S = 10.0
WINDOW_STATES = ".window/states.tgz"  # an earlier window's states.tgz (gpu_evidence.sh)
# with --graph, each call's gpu_evidence.sh first runs the replay CUDA tests (its GRAPH=1 gate),
# for at most its GATE_S, out of the call's LIMIT: the plan keeps that too
GATE_S = 150.0
UNDECIDED = ("partly", "not testable", "evidence pending")


@dataclass
class Candidate:
    sweep: str
    study: str
    members: int  # of the plan
    to_run: int  # of them, not in evidence yet
    stack_s: list[float]  # the cost model's seconds of each stack of those to run, alone
    claims: list[tuple[str, str]] = field(default_factory=list)  # (claim id, outcome)
    skipped: str = ""  # why the study cannot run as asked (e.g. --seeds on a seed that goes
    # with another key neither one for one nor at one value)
    off_graph: str = ""  # --graph: how many of those to run stay eager, and the first why
    graph_paths: set[str] = field(default_factory=set)  # --graph: the rate paths (gpu_rates)
    # of those to run that are captured

    @property
    def trials(self) -> int:
        return len(self.stack_s)

    @property
    def planned_s(self) -> float:
        """The study alone in a window: its stacks on up to SIDE_BY_SIDE processes."""
        return window_seconds([self])

    @property
    def undecided(self) -> int:
        return sum(outcome in UNDECIDED for _, outcome in self.claims)

    def rank(self) -> tuple:
        """Undecided claims first, most of them per planned second; then studies behind
        decided claims, then the rest; cheaper first."""
        group = 0 if self.undecided else 1 if self.claims else 2
        return group, -self.undecided / max(self.planned_s, 1.0), self.planned_s, self.sweep, \
            self.study


def served(claims: list[tuple[str, str]]) -> str:
    """"6 claims: 5 not testable, 1 reproduced" (or "no claim")."""
    if not claims:
        return "no claim"
    counts: dict[str, int] = {}
    for _, outcome in claims:
        counts[outcome] = counts.get(outcome, 0) + 1
    parts = ", ".join(f"{n} {o}" for o, n in sorted(counts.items(), key=lambda x: -x[1]))
    return f"{len(claims)} claim{'s' if len(claims) > 1 else ''}: {parts}"


def claims_by_study(preset: str) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """(sweep, study) -> the (claim id, outcome) of every claim (part) whose rows come from
    that study at `preset`, decided on the committed evidence."""
    from analysis.verdicts import decide_all

    found: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for decision in decide_all(preset=preset):
        for leaf in decision.leaves():
            for source in leaf.claim.sources():
                if source.preset == preset:
                    found.setdefault((source.sweep, source.study), []).append(
                        (leaf.claim.id, leaf.outcome))
    return found


def candidates(preset: str, files: list[tuple[str, str | None]], seeds: int | None,
               every: bool = False, graph: bool = False) -> list[Candidate]:
    """Every grid study of the selected sweep files (`icl.catalog.selected`: (file, study or
    None) pairs) that has `preset`, costed on one GPU: the members not committed in
    evidence/<preset>/, or with `every` all of them; with `graph`, each on the graph path
    where its config allows it."""
    from analysis.claims.evidence import load
    from icl.catalog import load_sweep
    from icl_core.planning import gpu_rates
    from icl_core.running.trial_pool import cost_model
    from icl_core.spec.config import ConfigError, on_graph_path
    from icl_core.spec.study import Study
    from icl_core.training.stack_rules import stack_groups

    claims = claims_by_study(preset)
    model = cost_model(1.0, 1)  # one GPU: its cached calibrations, else the H100 rate model
    out = []
    for name, only_study in files:
        sweep = load_sweep(name)
        for study in sweep.studies:
            if not isinstance(study, Study) or preset not in study.presets or \
                    (only_study and study.name != only_study):
                continue
            served_claims = claims.get((name, study.name), [])
            try:
                members = study.members(preset, {"device": "cuda"}, num_samples=seeds or None)
                if graph:
                    paths = [on_graph_path(m) for m in members]
                    members = [m for m, _ in paths]
            except ConfigError as exc:
                out.append(Candidate(name, study.name, 0, 0, [], served_claims, str(exc)))
                continue
            rows = None if every else load(preset, name, study.name)
            held = set(rows["config_hash"].unique().to_list()) if rows is not None else set()
            to_run = [m for m in members if m.hash not in held]
            stacks = [[to_run[i] for i in g] for g in stack_groups(to_run, "always")]
            eager = [why for m, why in paths if why and m.hash not in held] if graph else []
            out.append(Candidate(name, study.name, len(members), len(to_run),
                                 [model.unit_seconds(s) for s in stacks], served_claims,
                                 off_graph=f"{len(eager)} of them eager ({eager[0]})"
                                 if eager else "",
                                 graph_paths={gpu_rates.path_of(m) for m in to_run
                                              if m.train.cuda_graph}))
    return out


def choose(found: list[Candidate], window_s: float) -> list[Candidate]:
    """Greedy in rank order: a study joins while the window's planned wall
    (`window_seconds`) stays within the window."""
    chosen: list[Candidate] = []
    for c in sorted(found, key=Candidate.rank):
        if c.to_run and window_seconds([*chosen, c]) <= window_s:
            chosen.append(c)
    return chosen


def kept_s(graph: bool = False) -> float:
    """What each call keeps from its jobs: STARTUP_S, and with `graph` the gate's GATE_S."""
    return STARTUP_S + (GATE_S if graph else 0.0)


def calls(found: list[Candidate], window_s: float, call_s: float | None = None,
          kept: float = STARTUP_S) -> list[tuple[list[Candidate], float]]:
    """The window as commands run one after another, each (its studies, its time limit): a call
    of at most `call_s` seconds (the whole window without), spent from the window whole since a
    command may run to its limit, takes by `choose` what fits its limit less `kept` (`kept_s`:
    each call starts its processes anew) from the studies the calls before it left."""
    left, rest, out = window_s, list(found), []
    while left > kept:
        limit = min(call_s or left, left)
        chosen = choose(rest, limit - kept)
        if not chosen:
            break
        out.append((chosen, limit))
        left -= limit
        rest = [c for c in rest if all(c is not o for o in chosen)]
    return out


def processes(chosen: list[Candidate]) -> dict[str, int]:
    """Processes per job (one job per sweep file), SIDE_BY_SIDE in all (one a job at least):
    each next one to the job with the most planned seconds per process, never more than its
    stacks, so the jobs end about together."""
    seconds: dict[str, float] = {}
    stacks: dict[str, int] = {}
    for c in chosen:
        seconds[c.sweep] = seconds.get(c.sweep, 0.0) + sum(c.stack_s)
        stacks[c.sweep] = stacks.get(c.sweep, 0) + c.trials
    workers = {sweep: 1 for sweep in seconds}
    for _ in range(SIDE_BY_SIDE - len(workers)):
        open_jobs = [j for j in workers if workers[j] < stacks[j]]
        if not open_jobs:
            break
        most = max(open_jobs, key=lambda j: seconds[j] / workers[j])
        workers[most] += 1
    return workers


def makespan(seconds: list[float], workers: int) -> float:
    """Stacks taken longest first by the first free of `workers` processes."""
    return max(longest_first(seconds, max(1, workers))[1])


def window_seconds(chosen: list[Candidate]) -> float:
    """The planned wall of running `chosen` as `command` runs them: each job's stacks over
    its processes, every stack at SHARED_SLOWDOWN x its time alone when more than one
    process shares the GPU (`on_share`; measured on an H100 at five); infinite
    where they would need more than SIDE_BY_SIDE jobs (sweep files)."""
    workers = processes(chosen)
    if len(workers) > SIDE_BY_SIDE:  # a job a sweep file, a process a job at least
        return math.inf
    share = 1 / max(1, sum(workers.values()))  # of the GPU, a process's
    return max((on_share(makespan([s for c in chosen if c.sweep == job for s in c.stack_s], w),
                         share) for job, w in workers.items()), default=0.0)


def command(chosen: list[Candidate], preset: str, window_s: float, seeds: int | None,
            every: bool = False, graph: bool = False, store: str | None = None,
            states: str | None = None) -> str:
    """The one command that runs the chosen studies on the lent machine: one job per sweep
    file, with its `processes`, its LIMIT MARGIN_S short of the window; `store`: the folder
    it trains into there (default: the script's); `states`: an earlier window's states.tgz."""
    by_sweep: dict[str, list[Candidate]] = {}
    for c in chosen:
        by_sweep.setdefault(c.sweep, []).append(c)
    workers = processes(chosen)
    jobs = []
    for sweep, cs in by_sweep.items():
        job = f"{sweep}:{','.join(c.study for c in cs)}:cuda:{workers[sweep]}"
        jobs.append(job + (f":{seeds}" if seeds else ""))
    return (f"{'ALL=1 ' if every else ''}{'GRAPH=1 ' if graph else ''}"
            f"{f'STORE={store} ' if store else ''}{f'STATES={states} ' if states else ''}"
            f"OUT=$OUT "
            f"LIMIT={math.floor(window_s - MARGIN_S)} bash "
            f"benchmarks/gpu_evidence.sh {preset} " + " ".join(jobs))


def main(argv: list[str] | None = None, prog: str = "icl plan") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpu-minutes", type=float, required=True,
                        help="the window on one GPU, in minutes")
    parser.add_argument("--preset", default="reduced", help="default: reduced")
    parser.add_argument("--only", nargs="+", metavar="SWEEP[/STUDY]",
                        help="these files or studies only (default: every file)")
    parser.add_argument("--seeds", type=int, default=None,
                        help="seeds per setting in place of the preset's (fixed before the run)")
    parser.add_argument("--all", action="store_true",
                        help="plan every member, committed evidence or not (the preset's studies "
                        "run afresh in one window: the command, and their planned wall)")
    parser.add_argument("--graph", action="store_true",
                        help="each member's step a CUDA graph where its config allows it (the "
                        "same members: their hashes and random streams)")
    parser.add_argument("--call-minutes", type=float, default=None,
                        help="the longest one command may run (a lent GPU machine: 10): the "
                        "window as calls of at most this, each its own command and store "
                        "(default: the window in one call)")
    args = parser.parse_args(argv)
    from icl_core.spec.config import ConfigError
    from icl_core.spec.study import PRESETS

    if not args.gpu_minutes > 0:
        raise ConfigError(f"--gpu-minutes: must be > 0, got {args.gpu_minutes:g}")
    kept = kept_s(args.graph)
    if args.call_minutes is not None and not args.call_minutes * 60 > kept:
        raise ConfigError(f"--call-minutes: must be more than the {kept:.0f} s a call keeps "
                          f"for start-up{' and the replay tests' if args.graph else ''}, got "
                          f"{args.call_minutes:g}")
    if args.seeds is not None and args.seeds < 1:
        raise ConfigError(f"--seeds: must be >= 1, got {args.seeds}")
    if args.preset not in PRESETS:
        raise ConfigError(f"--preset: unknown {args.preset!r}; valid choices: "
                          f"{', '.join(PRESETS)}")
    window_s = args.gpu_minutes * 60
    from icl.catalog import selected

    try:
        files = selected(args.only)
    except KeyError as exc:  # an unknown sweep file, named with the valid ones
        raise ConfigError(f"--only: {exc.args[0]}") from None
    found = candidates(args.preset, files, args.seeds, every=args.all, graph=args.graph)
    if not found:
        raise ConfigError(f"--preset: no selected grid study has a {args.preset!r} preset")
    call_s = args.call_minutes * 60 if args.call_minutes else None
    planned = calls(found, window_s, call_s, kept)
    chosen = [c for studies, _ in planned for c in studies]
    print(f"a {args.gpu_minutes:g}-minute window on one GPU [{args.preset}]: planned by the cost "
          f"model ({SIDE_BY_SIDE} processes side by side at most; `icl cost` shows its fit), "
          f"{kept:.0f} s kept for start-up and the archive"
          + (f" ({GATE_S:.0f} s of them for GRAPH=1's replay tests)" if args.graph else "")
          + (f" in each call of at most {args.call_minutes:g} minutes" if call_s else "")
          + "; + chosen")
    for c in sorted(found, key=Candidate.rank):
        mark = "+" if any(c is o for o in chosen) else " "
        what = (f"{c.to_run} of {c.members} members to run in {c.trials} stacks, planned "
                f"{c.planned_s:.0f} s") if c.to_run else \
            f"skipped ({c.skipped})" if c.skipped else \
            f"all {c.members} members in evidence/{args.preset}"
        print(f"{mark} {c.sweep}/{c.study}: {what}; {served(c.claims)}"
              + (f"; {c.off_graph}" if c.off_graph else ""))
    walls = ", ".join(f"{window_seconds(studies):.0f} s of {limit - kept:.0f} s"
                      for studies, limit in planned) or f"0 s of {max(0.0, window_s - kept):.0f} s"
    print(f"chosen: {len(chosen)} of {len(found)} studies"
          + (f" in {len(planned)} calls" if len(planned) > 1 else "") + f", planned {walls}")
    if args.all:
        runnable = [c for c in found if c.to_run]
        print(f"every runnable study of the selection ({len(runnable)}) in one window: planned "
              f"{window_seconds(runnable):.0f} s, {sum(c.to_run for c in runnable)} members in "
              f"{sum(c.trials for c in runnable)} stacks")
    if not chosen:
        left = [c.planned_s for c in found if c.to_run]
        print("nothing to run in this window: " + (
            f"the cheapest study left is planned at {min(left):.0f} s" if left else
            f"every member is in evidence/{args.preset} (--seeds N adds seeds; another "
            "--preset, another scale)"))
        return 1
    several = len(planned) > 1  # each call its own store there, so its archive holds its own
    states = WINDOW_STATES if Path(WINDOW_STATES).is_file() else None
    lines = [command(studies, args.preset, limit, args.seeds, every=args.all, graph=args.graph,
                     store=f"/tmp/gpu_evidence_store{i + 1}" if several else None,
                     states=states)
             for i, (studies, limit) in enumerate(planned)]
    merges = [f"icl evidence --merge --from /tmp/store{i + 1 if several else ''} "
              f"--preset {args.preset} " + " ".join(f"{c.sweep}/{c.study}" for c in studies)
              for i, (studies, _) in enumerate(planned)]
    print((f"with the states of members an earlier window cut off ({WINDOW_STATES}): carry "
           f"[\"{Path(WINDOW_STATES).parent}\"]; " if states else "")
          + "a call that cuts members off brings back their states as states.tgz when they fit: "
          f"keep it as {WINDOW_STATES} for the next window (none back: remove the old one)"
          + (" (the calls' states.tgz unpacked into one folder and packed again)"
             if several else ""))
    if not several:
        print(f"run on the GPU machine:\n  {lines[0]}\nthen here, with its store.tgz unpacked "
              f"into an empty /tmp/store:\n  {merges[0]} && icl verdicts --write")
    else:
        print("run on the GPU machine, one call after another, each its own $OUT (an empty "
              "folder; a lent machine's start and the gaps between calls are not in the "
              "window):\n" + "\n".join(f"  call {i + 1}: {line}" for i, line in enumerate(lines))
              + "\nthen here, with call i's store.tgz unpacked into an empty /tmp/store<i> (each "
              "merge on its own: a call cut before its first member leaves nothing to merge):"
              "\n  " + "; ".join(merges) + "; icl verdicts --write")
    if args.graph:
        from icl_core.planning import gpu_rates

        unfitted = sorted(set().union(*(c.graph_paths for c in chosen))
                          - set(gpu_rates.load().rates))
        if unfitted:
            print(f"the graph path{'s' if len(unfitted) > 1 else ''} {', '.join(unfitted)} "
                  f"{'are' if len(unfitted) > 1 else 'is'} not fitted yet (`icl cost`): its "
                  "steps are costed as the eager path's, so this plan is an upper bound")
    return 0
