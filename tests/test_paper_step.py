"""benchmarks/paper_step.py: measured ms/step and peak beside the cost and memory models'
estimates, on this machine's device (a smoke member, a few steps)."""

from __future__ import annotations

import re

import paper_step

from icl.catalog import load_sweep
from icl_core.planning.cost import CostModel, device_label


def test_paper_step_prints_the_measurement_beside_the_model(capsys):
    assert paper_step.main(["depth_scaling", "--study", "least_squares", "--preset", "smoke",
                            "--steps", "3", "--limit", "1", "--device", "cpu"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "ms/step" in x)
    measured, model, ratio = re.search(
        r": ([\d.]+) ms/step.*model: ([\d.]+) ms/step, measured/model ([\d.]+)x", line).groups()
    member = load_sweep("depth_scaling").study("least_squares").members("smoke")[0]
    expected = 1e3 * CostModel(device_label("cpu", 1)).step_seconds(member)[0]
    assert float(model) == round(expected, 2)
    assert abs(float(ratio) - float(measured) / float(model)) < 0.02 * float(ratio) + 0.01
    assert re.search(r"memory [\d.]+ (kB|MB|GB)\)", line)
