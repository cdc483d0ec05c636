"""benchmarks/run_without_ray.py plans a sweep's grid studies without Ray and skips its
searches (which need Optuna + Tune), whatever attributes a search shares with a grid."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "run_without_ray.py"


def load_script():
    spec = importlib.util.spec_from_file_location("run_without_ray", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_sweep_with_a_search_plans_only_its_grid_studies(tmp_path):
    script = load_script()
    # deep_optimizers_plateau holds a grid (curriculum) and a search (lr_search, with a grid)
    specs = script.trials("deep_optimizers_plateau", "smoke", [], str(tmp_path), "auto",
                          "never", {}, {})
    assert specs and {s.study for s in specs} == {"curriculum"}
    assert (tmp_path / "deep_optimizers_plateau" / "curriculum" / "study.json").exists()
