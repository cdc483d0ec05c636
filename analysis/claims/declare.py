"""A paper's claim declared as data: what is compared, on which rows, with which factor. The
engine (`analysis.claims.engine`) decides every claim by the same rules; nothing here runs.

    Claim(id="ahn.layers.L4", paper="Ahn", figure="Fig 5 (L = 4)",
          quote="the trained loss matches f_L*", source=Source("preconditioned_gd",
          "lsa_layers", "reduced"), kind="within", factor=1.1, metric="mse", statistic="mean",
          cells=(Cell("L = 4", {"model.layers": 4, "train.batch_size": 20_000}),),
          reference="lsa_optimal_float64", reference_where={"infer_iter": 4})

Kinds (`KINDS`), each a general rule any claim may use:
* "better": cell A better than cell B (errors: lower; R²: higher).
* "gap": B ÷ A >= factor (errors; A the better side). factor is the paper's own ("~100x").
* "within": A ÷ reference <= factor, paired per seed on the same prompts where `reference` is
  a predictor scored on the model's own test prompts (f_L*-optimal, OLS, GD, ...); else A ÷ B.
* "reaches": A reaches `value` (errors: <= value; R²: >= value), a level the paper names.
* "slope": the slope of log(value) on log(x) over the cells (x: `x` column), per seed, has
  the sign of `value` (-1: falls, +1: grows) or, with `factor`, lies within `factor` of 0
  (factor 0: its interval reaches 0), or, with `below` (a second curve's cells), lies below
  that curve's slope, the two intervals apart (a milder dependence on x).
* "exact": a closed form or construction: |A − value| / |value| <= tolerance (no seeds).
A claim in parts (`parts`) is "partly" where some parts are reproduced and some are not; with
parts_rule "first", it is reproduced where its first part is, else partly where another is
(a criterion written as "X, or at least Y: partly").
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

KINDS = ("better", "gap", "within", "reaches", "slope", "exact")
PARTS_RULES = ("all", "first")
MIN_SEEDS = 3  # seeds per compared cell before a claim about trained models is judged


@dataclass(frozen=True)
class Source:
    """Where a claim's rows come from: a sweep file's study at a preset (its evaluation
    settings: test prompts, seeds, steps are the preset's, fixed before the run)."""

    sweep: str
    study: str
    preset: str

    def command(self) -> str:
        """The command that produces this evidence (resumable)."""
        return (f"icl catalog --run --preset {self.preset} --only {self.sweep}/{self.study} "
                f"--storage results --resume && icl evidence --from results --preset "
                f"{self.preset} {self.sweep}/{self.study}")


@dataclass(frozen=True)
class Cell:
    """The rows of one compared cell: config columns equal to `where` (dotted names:
    "model.layers"; also "position", "infer_iter", "loop_iter"), the model's rows (predictor
    "model", or `predictor`: a trained reference such as "teacher_net_float32" is gated like a
    model), one value per seed."""

    label: str
    where: dict[str, Any] = field(default_factory=dict)
    predictor: str = "model"
    trained: bool = True  # False: a hand-built model or baseline (no learned regime, no seeds)
    # False: the cell is the claimed failure itself (e.g. the same models past their training
    # length): its learned regime is not asked (its seeds still are)
    gated: bool = True
    test_dist: str | None = None  # this cell's test distribution (None: the claim's)


@dataclass(frozen=True)
class Claim:
    id: str  # "<paper>.<study>.<what>", unique
    paper: str
    figure: str
    quote: str  # the paper's own words, short
    source: Source | None  # None: a closed form evaluated in process (kind "exact")
    kind: str  # one of KINDS
    cells: tuple[Cell, ...] = ()
    metric: str = "mse"
    statistic: str = "median"  # over prompts: mean | median | pooled
    position: int | None = None  # prompt position (k); None: each member's last (the query)
    test_dist: str = "train"
    factor: float | None = None  # the paper's own factor (gap, within, slope)
    value: float | None = None  # reaches: the level; slope: the sign; exact: the closed form
    tolerance: float | None = None  # exact: relative tolerance
    reference: str | None = None  # within: a predictor on the same prompts (paired per seed)
    reference_where: dict[str, Any] = field(default_factory=dict)  # e.g. {"infer_iter": 4}
    # the reference is the optimum of the model's class on those prompts (f_L*): where it
    # misses the learned bar itself, no model can clear it ("bar out of reach")
    reference_is_optimum: bool = False
    # better / gap between two cells of the same seeds (e.g. one model at two iterations, or two
    # members scored on the same prompts): per-seed differences instead of two samples
    paired: bool = False
    x: str | None = None  # slope: the config column on the x axis
    below: tuple[Cell, ...] = ()  # slope: the cells of a curve whose slope this one's is below
    # a claim about reaching error `threshold` (samples to reach it, e.g. the steps a run took
    # to stop there): its trained cells are gated by the threshold rule (threshold <= 0.5 x the
    # best trivial error, analysis.reading.regime.THRESHOLD_RATIO) instead of the learned bar;
    # a threshold above it is "bar out of reach" (the threshold is the paper's, the trivial
    # level the task's: no model or training changes it)
    threshold: float | None = None
    gate_metric: str | None = None  # the metric the gate reads (default: `metric`), e.g. mse
    gate_statistic: str | None = None  # and its statistic (default: `statistic`)
    parts: tuple[Claim, ...] = ()  # a claim in parts ("partly" possible); then no cells
    # how parts combine: "all" (every part reproduced: reproduced; some: partly) or "first"
    # (the first part reproduced: reproduced; else the others reproduced: partly)
    parts_rule: str = "all"
    scale: str = ""  # what the preset changes from the paper's setting, said in the table
    was: str = ""  # the hand-written verdict this row had before the engine (for the diff)
    figure_file: str = ""  # docs/figures/... the row links
    # an exact claim evaluates its own number in process: "module:function" returning a float
    compute: str = ""

    def __post_init__(self):
        from analysis.reading.regime import is_r2

        if self.kind not in KINDS and not self.parts:
            raise ValueError(f"claim {self.id}: kind {self.kind!r}; valid choices: "
                             f"{', '.join(KINDS)}")
        if self.kind == "gap" and is_r2(self.metric):
            raise ValueError(f"claim {self.id}: a gap's factor is a ratio of errors; on "
                             f"{self.metric} (R²) declare 'better' or a level ('reaches')")
        if self.below and (self.kind != "slope" or self.value or self.factor is not None):
            raise ValueError(f"claim {self.id}: `below` is a slope's other curve; it takes "
                             "neither a sign (value) nor a factor")
        if self.parts_rule not in PARTS_RULES:
            raise ValueError(f"claim {self.id}: parts_rule {self.parts_rule!r}; valid choices: "
                             f"{', '.join(PARTS_RULES)}")

    def declared(self) -> dict:
        """What the claim's hash covers: everything that decides it (not `was`, not docs: the
        quote, the figure, the scale's words, which describe the evidence, so more seeds of the
        same members re-declare nothing). The sources' presets are hashed by name; that their
        settings are still those the evidence ran at is a test's (tests/test_verdict_table.py:
        every committed member is one of its preset's members)."""
        d = asdict(self)
        for k in ("was", "figure_file", "quote", "scale"):
            d.pop(k)
        for later, unset in (("below", ()), ("reference_is_optimum", False),
                             ("parts_rule", "all")):  # declared later than the rest: absent
            if d[later] == unset:  # where unset, so every other claim's hash stays
                d.pop(later)
        d["parts"] = [p.declared() for p in self.parts]
        return d

    def hash(self) -> str:
        text = json.dumps(self.declared(), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def sources(self) -> list[Source]:
        found = [self.source] if self.source else []
        for p in self.parts:
            found += [s for s in p.sources() if s not in found]
        return found
