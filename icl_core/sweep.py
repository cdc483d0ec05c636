"""A sweep file's entry: a Sweep holds the studies (icl_core.study.Study, icl_core.search.Search)
of one file in sweeps/, and `SWEEP.main()` runs the shared command line (icl_core.cli).

    from icl_core.sweep import Preset, Study, Sweep

    SWEEP = Sweep("depth_scaling", [STUDY])
    if __name__ == "__main__":
        SWEEP.main()

Preset and Study are defined in icl_core.study and re-exported here, the one import a sweep
file needs.
"""

from __future__ import annotations

from dataclasses import dataclass

from icl_core.study import (  # noqa: F401  (re-exported for sweep files)
    PRESETS,
    Preset,
    Study,
    apply_preset,
    expand,
    parse_override,
)
from icl_core.validation import unknown


@dataclass
class Sweep:
    name: str
    studies: list  # Study or icl_core.search.Search

    def study(self, name: str) -> Study:
        for study in self.studies:
            if study.name == name:
                return study
        raise unknown("--study", "", name, [s.name for s in self.studies])

    def main(self, argv: list[str] | None = None) -> int:
        from icl_core.cli import main

        return main(self, argv)
