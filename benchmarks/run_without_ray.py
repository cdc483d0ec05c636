"""Run studies' members on a bare machine without Ray (torch + pyarrow only), in a process pool.

    python benchmarks/run_without_ray.py algoformer --preset gpu [--study loops ...]
        [--storage results] [--workers 8] [--device auto] [--stack auto]
        [--where task.name=rep_regression ...] [--time-limit SECONDS] [--seeds N]
        [--skip-evidence] [--interleave] [--graph]

For a lent GPU machine whose image has no Ray (its wheel exceeds what can be carried there):
the same members, trial code (`icl_core.running.trial`, through
`icl_core.running.store_checkpoints`) and row files as a sweep run, so `icl regenerate` draws
the figures from the rows afterwards. Members that differ only in their seeds form one trial
(stacked on CUDA under `--stack auto`); finished members are skipped, as a sweep re-run skips
them. No restarts, no Tune: a failing member is recorded with its reason by the trial code and
the others go on. Prints one line per trial.
`--time-limit` stops the pool that many seconds after this process started (its imports and
planning count; for a lent machine's window): what finished is in the store, the trials cut off
are named and go on, on the next run with the same `--storage`, from their members' last
checkpoints: each member's state is written into the store at its checkpoint steps
(`train.checkpoint_every`), at most every ICL_CHECKPOINT_MIN_S (60) seconds a trial, and
removed with its rows (a failed member keeps it; icl_core.running.store_checkpoints). A study
name the sweep file's grid studies do not hold is refused, naming them. Exit status 1 when
trials ran and none left a member that finished (every one failed).
`--graph` trains every member whose config allows it with its step captured as a CUDA graph
(the same members: their hashes and random streams; the others train as they are, one line
per study says how many and why).
"""

from __future__ import annotations

import time

STARTED = time.time()  # --time-limit counts from here: the imports below take seconds

import argparse  # noqa: E402
import multiprocessing as mp  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from icl.catalog import load_sweep  # noqa: E402
from icl_core import Study  # noqa: E402
from icl_core.running.store_checkpoints import (  # noqa: E402
    FINISHED,
    clear_leftovers,
    resumed_note,
    run_with_store_checkpoints,
)
from icl_core.running.study_report import write_manifest  # noqa: E402
from icl_core.running.trial import TrialSpec  # noqa: E402
from icl_core.running.trial_pool import cost_model  # noqa: E402
from icl_core.spec.config import flatten, on_graph_path  # noqa: E402
from icl_core.storage.provenance import driver_provenance  # noqa: E402
from icl_core.storage.store import Store  # noqa: E402
from icl_core.training.stack_rules import stack_key  # noqa: E402


def selected(member, where: dict[str, str]) -> bool:
    """The member's flattened config matches every `key=value` of `--where` (as text)."""
    flat = flatten(member.to_dict())
    return all(str(flat.get(key)) == value for key, value in where.items())


def trials(sweep_name: str, preset: str, studies: list[str], storage: str, device: str,
           stack: str, provenance: dict, where: dict[str, str], seeds: int | None = None,
           skip: dict | None = None, interleave: bool = False, graph: bool = False
           ) -> list[TrialSpec]:
    """The trials of the selected studies' members not yet finished in `storage` (nor in
    `skip`: (sweep, study) -> config hashes held elsewhere, e.g. committed evidence); `seeds`
    plans seeds 0..seeds-1 in place of the preset's; longest first by the cost model. A trial
    per stack, or with `interleave` one per study, its stacks trained at once in one process
    (TrialSpec.interleave). `graph`: each member on the graph path where its config allows it
    (`on_graph_path`)."""
    sweep, store, out, seconds = load_sweep(sweep_name), Store(storage), [], []
    model = cost_model(1.0 if device.startswith("cuda") else 0.0, 1)
    grids = [s.name for s in sweep.studies if isinstance(s, Study)]
    unknown = [s for s in studies if s not in grids]
    if unknown:
        raise SystemExit(f"error: --study: {', '.join(map(repr, unknown))} is not a grid study of "
                         f"{sweep_name}; valid choices: {', '.join(grids)}")
    for study in sweep.studies:
        if studies and study.name not in studies or not isinstance(study, Study):
            continue  # searches need Optuna + Tune
        write_manifest(store, sweep, study)  # what analysis.regenerate reads of the study
        skipped = set((skip or {}).get((sweep.name, study.name), ()))
        # what a killed run left in checkpoints/, and a state carried in (STATES=) of a member
        # committed since (skipped)
        clear_leftovers(store, sweep.name, study.name, done_elsewhere=skipped)
        done = store.finished(sweep.name, study.name) | skipped
        groups: dict = {}
        sets = {"device": device} if device != "auto" else None
        refused: list[str] = []
        for m in study.members(preset, sets, num_samples=seeds or None):
            why = None
            if graph:
                m, why = on_graph_path(m)
            if m.hash not in done and selected(m, where):
                groups.setdefault(stack_key(m) or m.hash, []).append(m)
                refused += [why] if why else []
        if refused:
            print(f"{study.name}: {len(refused)} members stay off the graph path ({refused[0]})",
                  flush=True)
        if interleave and groups:
            out.append(TrialSpec(sweep.name, study.name, storage,
                                 [m.to_dict() for g in groups.values() for m in g],
                                 provenance=provenance, stack=stack, interleave=True))
            seconds.append(sum(model.unit_seconds(g) for g in groups.values()))
            continue
        out += [TrialSpec(sweep.name, study.name, storage, [m.to_dict() for m in g],
                          provenance=provenance, stack=stack) for g in groups.values()]
        seconds += [model.unit_seconds(g) for g in groups.values()]
    # longest first by the cost model, as `icl plan --gpu-minutes` plans a job's processes
    return [spec for _, spec in sorted(zip(seconds, out, strict=True), key=lambda x: -x[0])]


def committed_hashes(sweep: str, preset: str) -> dict:
    """(sweep, study) -> the config hashes of the rows committed in evidence/<preset>/ (read
    with pyarrow alone: the lent machine has no Polars guarantee)."""
    import pyarrow.parquet as pq

    root = Path(__file__).resolve().parent.parent / "evidence" / preset / sweep
    found: dict = {}
    for path in sorted(root.glob("*/rows/*.parquet")):
        study = path.parent.parent.name
        hashes = pq.read_table(path, columns=["config_hash"]).column(0).to_pylist()
        found.setdefault((sweep, study), set()).update(hashes)
    return found


def run(spec: TrialSpec) -> tuple[str, int, float, str, bool]:
    """(study, members, seconds, its line's result: statuses and what was resumed, whether
    a member finished: ok, diverged or pruned)."""
    start, statuses, resumed = time.time(), {}, {}
    try:
        statuses, resumed, failure = run_with_store_checkpoints(spec)
        result = ",".join(sorted(set(statuses.values())))
        result += f" (failed: {failure[:200]})" if failure else ""
    except Exception as err:  # the store or the trial code broke: keep the pool going
        result = f"failed: {str(err)[:200]}"
    if resumed:
        result += f" ({resumed_note(resumed)})"
    finished = any(s in FINISHED for s in statuses.values())
    return spec.study, len(spec.members), time.time() - start, result, finished


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep")
    parser.add_argument("--preset", default="cpu")
    parser.add_argument("--study", action="append", default=[])
    parser.add_argument("--storage", default="results")
    parser.add_argument("--workers", type=int, default=mp.cpu_count())
    parser.add_argument("--device", default="auto")
    parser.add_argument("--stack", default="auto")
    parser.add_argument("--where", action="append", default=[],
                        help="only members whose flattened config has key=value")
    parser.add_argument("--time-limit", type=float, default=None, metavar="SECONDS",
                        help="stop after this long; unfinished trials go on from their "
                             "members' last checkpoints on the next run")
    parser.add_argument("--seeds", type=int, default=None,
                        help="seeds 0..N-1 per setting in place of the preset's")
    parser.add_argument("--skip-evidence", action="store_true",
                        help="skip the members whose rows are committed in evidence/<preset>/")
    parser.add_argument("--graph", action="store_true",
                        help="each member's step a CUDA graph where its config allows it "
                        "(the same members: their hashes and random streams)")
    parser.add_argument("--interleave", action="store_true",
                        help="one trial per study: its stacks trained at once in one process, "
                        "each on its own CUDA stream (default: a trial per stack)")
    args = parser.parse_args()
    where = dict(w.split("=", 1) for w in args.where)
    skip = committed_hashes(args.sweep, args.preset) if args.skip_evidence else None
    specs = trials(args.sweep, args.preset, args.study, args.storage, args.device, args.stack,
                   driver_provenance(), where, args.seeds, skip, args.interleave, args.graph)
    members = sum(len(s.members) for s in specs)
    print(f"{args.sweep} [{args.preset}]: {len(specs)} trials, {members} members, "
          f"{args.workers} workers", flush=True)
    start, finished, worked = time.time(), 0, not specs
    with mp.get_context("spawn").Pool(args.workers) as pool:
        results = pool.imap_unordered(run, specs)
        while finished < len(specs):
            left = None if args.time_limit is None else \
                args.time_limit - (time.time() - STARTED)
            try:
                if left is not None and left <= 0:
                    raise mp.TimeoutError
                study, n, secs, result, ran = results.next(timeout=left)
            except mp.TimeoutError:
                pool.terminate()  # written rows stay (files are renamed into place)
                print(f"time limit {args.time_limit:g}s reached: {len(specs) - finished} of "
                      f"{len(specs)} trials not finished; a re-run with the same --storage "
                      f"goes on from their members' last checkpoints (from the first step where "
                      f"none was written)", flush=True)
                return 0 if worked or not finished else 1
            finished += 1
            worked |= ran
            print(f"[{time.time() - start:7.1f}s] {finished}/{len(specs)} {study}: {n} member(s) "
                  f"in {secs:.1f}s -> {result}", flush=True)
    if not worked:
        print(f"every one of the {len(specs)} trials failed: no member finished", flush=True)
    return 0 if worked else 1


if __name__ == "__main__":
    sys.exit(main())
