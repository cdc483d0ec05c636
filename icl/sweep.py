"""A sweep file's entry: a Sweep holds the studies (icl_core.spec.study.Study, icl_core.running.search.Search)
of one file in sweeps/; `SWEEP.main()` runs the shared command line (icl.cli), and
`SWEEP.run(...)` / `SWEEP.plan(...)` are the same from Python (icl.api, for notebooks).

    from icl.sweep import Preset, Study, Sweep

    SWEEP = Sweep("depth_scaling", [STUDY])
    if __name__ == "__main__":
        SWEEP.main()

Preset and Study are defined in icl_core.spec.study and re-exported here, the one import a sweep
file needs.
"""

from __future__ import annotations

from dataclasses import dataclass

from icl_core.common.validation import unknown
from icl_core.spec.study import (  # noqa: F401  (re-exported for sweep files)
    PRESETS,
    Preset,
    Study,
    apply_preset,
    expand,
    parse_override,
)


@dataclass
class Sweep:
    name: str
    studies: list  # Study or icl_core.running.search.Search

    def study(self, name: str) -> Study:
        for study in self.studies:
            if study.name == name:
                return study
        raise unknown("--study", "", name, [s.name for s in self.studies])

    def main(self, argv: list[str] | None = None) -> int:
        from icl.cli import main

        return main(self, argv)

    def run(self, **options):
        """Run this file's studies from Python; an icl.outcome.RunResult (`.rows()`,
        `.summary`, `.figures`, `.storage`). Keywords (icl.api.run): study, preset,
        storage, sets, sweeps, num_samples, pack, stack, max_concurrent, trial_minutes, address,
        resume, seed, figures, loggers, optuna_journal, yes. Bad input raises ConfigError."""
        from icl.api import run

        return run(self, **options)

    def plan(self, **options):
        """The plan --dry-run prints, as data (icl.outcome.PlanData); runs nothing.
        Keywords (icl.api.plan): study, preset, storage, sets, sweeps, num_samples,
        pack, stack, trial_minutes, seed, plan_gpus, plan_cpus, optuna_journal, echo."""
        from icl.api import plan

        return plan(self, **options)
