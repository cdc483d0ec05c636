"""Analysis of sweep results: read the row store, fit scaling laws, regenerate figures.

    icl regenerate depth_scaling            # figures/depth_scaling/<study>/...
    icl regenerate --all

Sub-packages, each importing only those below it (contracts: [tool.importlinter] in
pyproject.toml): `figures` (one function per paper figure; `figures.registry`, the registry) and
`forecasts` (sealed forecasts, adaptive design), over `plotting` (the figure toolkit, one public
import), over `fitting` (the one scaling-law fitter, its forms, sample complexity) and `reading`
(the store reader, frames, seed spreads, the learned-regime bar). Beside them: `verdicts` (the
rules; orderings and claim verdicts that can fail) and `regenerate` (the command line).
Analysis never imports icl_core's orchestration (running, planning) nor the face (icl): what it needs
of a study travels in the rows or the manifest beside them.
"""

from icl_core import old_paths as _old_paths

_old_paths.install("analysis")
