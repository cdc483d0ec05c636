"""`icl levels`: a setting's trivial levels, floor and learned-regime bar, without training.

    icl levels <sweep> --study S [--preset P] [--set KEY=VALUE ...] [--metric M]
               [--statistic S] [--position K]
    python -m icl.levels <sweep> ...      (the same)

For each distinct task / evaluation setting among the study's members under the preset (the
model, training and seed axes collapse onto it), the trivial predictors (icl_core.training.trivial)
and the task's floor (icl_core.algorithms.floor) are measured on the very test prompts a trained member
is evaluated on, by the evaluator's own code (icl_core.training.evaluate: eval_prompts, trivial_rows,
floor_rows). Printed per evaluation point: each predictor's level at the last position (what
the learned-regime check judges; --position K: at k = K) and averaged over all positions,
the bar there (analysis.reading.regime.bar_levels: today's bar, the floor, the bar on the excess
over it) with "bar reachable" / "bar out of reach", and the positions where today's bar is
reachable.
Seconds: nothing trains. Keep only settings whose bar can be reached before training them.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import polars as pl

from analysis.reading.regime import (
    FLOOR,
    LEARNED_ERROR_RATIO,
    LEARNED_R2_GAP,
    REACH,
    RIDGE_SOLVES,
    TRIVIAL,
    bar_levels,
    is_r2,
)
from icl_core.common.validation import ConfigError, unknown

KEYS = ["setting", "test_dist"]


EVAL_FIELDS = ("n_prompts", "seed", "grid")  # what the test prompts depend on (eval_prompts)


def settings(members) -> list[tuple[str, object]]:
    """(label, first member) per distinct setting among `members`: the task config, task seed
    and the eval fields the test prompts depend on (`EVAL_FIELDS`); the label names the
    fields that differ among them ("task.noise_std=1.0")."""
    firsts: dict = {}
    for m in members:
        key = (m.task, m.task_seed, *(getattr(m.eval, f) for f in EVAL_FIELDS))
        firsts.setdefault(repr(key), m)
    flat = [{**{f"task.{k}": v for k, v in dataclasses.asdict(m.task).items()},
             "task_seed": m.task_seed, **{f"eval.{f}": getattr(m.eval, f) for f in EVAL_FIELDS}}
            for m in firsts.values()]
    keys = list(dict.fromkeys(k for f in flat for k in f))  # tasks of several kinds: all fields
    differ = [k for k in keys if len({repr(f.get(k)) for f in flat}) > 1]
    return [(", ".join(f"{k}={f[k]}" for k in differ if k in f) or "all", m)
            for f, m in zip(flat, firsts.values(), strict=True)]


def spans(ks: list[int]) -> str:
    """'0-14, 16, 22-24' from sorted integers."""
    out: list[str] = []
    for k in ks:
        if out and out[-1][1] == k - 1:
            out[-1][1] = k
        else:
            out.append([k, k])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in out) or "none"


def level_rows(members) -> pl.DataFrame:
    """The trivial and floor rows of every distinct setting (`settings`), with columns
    setting, task.name beside the evaluator's."""
    from icl_core.training.evaluate import eval_prompts, floor_rows, trivial_rows

    out = []
    for label, member in settings(members):
        for test_dist, task, batch in eval_prompts(member):
            rows = trivial_rows(task, batch, member.eval, test_dist, 0)
            rows += floor_rows(task, batch, member.eval, test_dist, 0)
            out += [{**r, "setting": label, "task.name": member.task.name} for r in rows
                    if r["infer_iter"] is None and r.get("loop_iter") is None]
    return pl.DataFrame(out, infer_schema_length=None)


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.4g}"


def _verdict(row: dict, r2: bool) -> str:
    bound = "ceiling" if r2 else "floor"
    floor = row["floor"] if row["floor"] is not None else (1.0 if r2 else 0.0)
    t = row["trivial"]
    share = (f" = {floor / t:.3g}x" if not r2 and t else "") if row["floor"] is not None else ""
    head = (f"best trivial {row['trivial_predictor']} {_fmt(t)}, {bound} {_fmt(floor)}"
            f"{share if row['floor'] is not None else ' (none reported)'}, bar "
            f"{_fmt(row['raw_bar'])}")
    if row["reach"] == REACH[0]:
        return f"{head}: bar reachable"
    if row["reach"] == REACH[1]:
        return (f"{head}: bar out of reach ({bound} beyond it); the bar on the excess over "
                f"the {bound}, {_fmt(row['bar'])}, is reachable")
    return f"{head}: bar out of reach: this setting cannot test the claim"


def report(frame: pl.DataFrame, metric: str, statistic: str, position: int | None = None
           ) -> list[str]:
    """Lines per (setting, test_dist) of `level_rows` (module docstring); `position`: the k
    to judge at (None: each setting's last)."""
    r2 = is_r2(metric)
    frame = frame.filter((pl.col("metric") == metric) & (pl.col("statistic") == statistic))
    if frame.height == 0:
        return [f"no {metric} ({statistic}) rows: try --metric / --statistic"]
    frame = frame.with_columns(pl.col("position").fill_null(-1))
    at = pl.col("position").max().over(KEYS) if position is None else pl.lit(position)
    last = frame.filter(pl.col("position") == at)
    mean = frame.group_by(*KEYS, "predictor", "task.name").agg(pl.col("value").mean())
    per_pos = bar_levels(frame, [*KEYS, "position"], r2)
    tables = {"last": bar_levels(last, KEYS, r2), "mean": bar_levels(mean, KEYS, r2)}
    rule = (f"R² >= trivial + {LEARNED_R2_GAP:g}" if r2 else
            f"error <= {LEARNED_ERROR_RATIO:g}x trivial")
    lines = [f"metric {metric} ({statistic} over prompts); bar: {rule} (on the excess over "
             "the floor where the task reports one)"]
    for (setting, dist), part in frame.partition_by(KEYS, as_dict=True,
                                                    maintain_order=True).items():
        name = part["task.name"][0]
        positions = sorted(set(part["position"].to_list()))
        k_last = positions[-1] if position is None else position
        if k_last not in positions:
            lines.append(f"\n{setting} [test_dist {dist}]: no position {k_last} (positions "
                         f"{positions[0]}..{positions[-1]})")
            continue
        lines.append(f"\n{setting} [test_dist {dist}] ({name}; positions "
                     f"{positions[0]}..{positions[-1]}):")
        lines.append(f"  {'predictor':<14}{'at k=' + str(k_last):>14}"
                     f"{'mean over k':>14}")
        levels = {p: {} for p in [*TRIVIAL, FLOOR] if p in set(part["predictor"])}
        for which, src in (("last", last), ("mean", mean)):
            cell = src.filter((pl.col("setting") == setting) & (pl.col("test_dist") == dist))
            for p, v in zip(cell["predictor"], cell["value"], strict=True):
                if p in levels:
                    levels[p][which] = v
        for p, v in levels.items():
            note = "  (reference: ridge solves this task)" if p == "ridge" and \
                name in RIDGE_SOLVES else ""
            lines.append(f"  {p:<14}{_fmt(v.get('last')):>14}{_fmt(v.get('mean')):>14}{note}")
        for which, label in (("last", f"at k = {k_last}"), ("mean", "averaged over k")):
            row = tables[which].filter((pl.col("setting") == setting)
                                       & (pl.col("test_dist") == dist)).row(0, named=True)
            lines.append(f"  {label}: {_verdict(row, r2)}")
        ok = per_pos.filter((pl.col("setting") == setting) & (pl.col("test_dist") == dist)
                            & (pl.col("reach") == REACH[0]))["position"].sort().to_list()
        assumed = "" if (part["predictor"] == FLOOR).any() else \
            f" (against an assumed {'ceiling 1' if r2 else 'floor 0'}: no floor reported)"
        lines.append(f"  bar reachable at k = {spans(ok)}{assumed}")
    return lines


def main(argv: list[str] | None = None, prog: str = "icl levels") -> int:
    from icl.catalog import load_sweep, sweep_names
    from icl_core.common.log import ensure_console
    from icl_core.running.plans import parse_sets
    from icl_core.spec.search import Search
    from icl_core.spec.study import PRESETS

    ensure_console()  # its lines (a store's coverage, warnings) on the console
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        names = sweep_names()
        if not argv or argv[0].startswith("-"):
            raise ConfigError(f"{prog}: name a sweep; valid choices: {', '.join(names)}")
        if argv[0] not in names:
            raise unknown(prog, "sweep", argv[0], names)
        sweep = load_sweep(argv[0])
        parser = argparse.ArgumentParser(prog=f"{prog} {sweep.name}")
        parser.add_argument("--study", required=len(sweep.studies) > 1,
                            help=f"one of {', '.join(s.name for s in sweep.studies)}")
        parser.add_argument("--preset", default="cpu", help=f"one of {', '.join(PRESETS)}")
        parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
        parser.add_argument("--metric", default=None, help="mse or r2 (default: r2 where the "
                            "task reports it, else mse)")
        parser.add_argument("--position", type=int, default=None, metavar="K",
                            help="judge at k = K examples (default: the last position)")
        parser.add_argument("--statistic", default=None, help="over prompts: median, mean, "
                            "... (default: pooled for r2, median for mse)")
        args = parser.parse_args(argv[1:])
        study = sweep.study(args.study) if args.study else sweep.studies[0]
        sets = parse_sets(args.set)
        if isinstance(study, Search):
            study = study.for_preset(args.preset)
            members = study.points(args.preset, sets)
        else:
            members = study.members(args.preset, sets)
        frame = level_rows(members)
        metric = args.metric or ("r2" if (frame["metric"] == "r2").any() else "mse")
        if metric not in set(frame["metric"]):
            raise unknown(f"{prog} --metric", "", metric, sorted(set(frame["metric"])))
        statistic = args.statistic or ("pooled" if is_r2(metric) else "median")
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{sweep.name}/{study.name} [{args.preset}]: {len(members)} member configs")
    print("\n".join(report(frame, metric, statistic, args.position)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(prog="python -m icl.levels"))
