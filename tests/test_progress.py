"""The live view's text: durations, the progress bar, the line redrawn on a terminal, and the
timestamped line everywhere else (icl_core.common.progress, icl_core.running.ray_launch)."""

from __future__ import annotations

import io
import re
import sys

import pytest
from ray.tune.experiment import Trial

from icl_core.common.progress import CLEAR, LiveLine, progress_bar, span
from icl_core.running.ray_launch import Progress


@pytest.mark.parametrize("seconds, text", [(0, "0s"), (-3, "0s"), (59.9, "59s"), (60, "1m00s"),
                                           (2670, "44m30s"), (3600, "1h00m"),
                                           (6316, "1h45m"), (200_000, "55h33m")])
def test_span(seconds, text):
    assert span(seconds) == text


def test_the_bar_at_0_partial_and_100_percent():
    assert progress_bar(0, 100, 60, trials=(0, 65), elapsed_s=0, eta_s=None) == (
        "[....................]    0%  0/65 trials  elapsed 0s  ETA ?")
    assert progress_bar(17, 40, 70, trials=(17, 65), elapsed_s=2670, eta_s=6316) == (
        "[########.............]   42%  17/65 trials  elapsed 44m30s  ETA 1h45m")
    assert progress_bar(65, 65, 100, trials=(65, 65), elapsed_s=9000, eta_s=0) == (
        "[" + "#" * 30 + "]  100%  65/65 trials  elapsed 2h30m  ETA 0s")  # at most 30 cells
    # rounded down: 100% only when all of it is done
    assert progress_bar(0.9999, 1, 30) == "[##############.]   99%  ETA ?"
    assert progress_bar(1, 4, 30) == "[###............]   25%  ETA ?"
    assert progress_bar(0, 0, 30) == "[###############]  100%  ETA ?"  # nothing planned: done


def test_a_narrow_terminal_drops_the_bar_then_cuts_the_text():
    line = progress_bar(17, 40, 50, trials=(17, 65), elapsed_s=2670, eta_s=6316)
    assert line == " 42%  17/65 trials  elapsed 44m30s  ETA 1h45m"  # 45: no room for 10 cells
    assert progress_bar(17, 40, 20, trials=(17, 65), elapsed_s=2670, eta_s=6316) == (
        " 42%  17/65 trials  ")
    assert progress_bar(17, 40, 0) == ""
    note = progress_bar(1, 2, 60, note="2 running, 1 failed, studies 0/8 done (a 1/3)")
    assert note == " 50%  ETA ?  2 running, 1 failed, studies 0/8 done (a 1/3)"[:60]


def test_a_live_line_stays_below_what_is_printed():
    term = io.StringIO()
    line = LiveLine(term)
    saved = sys.stdout
    sys.stdout = term  # the terminal it takes over
    try:
        line.open()
        line.draw("[s] 10%")
        print("a report", end="")  # print writes the text, then its newline
        line.draw("[s] 20%")  # after a line begun, not over it: kept for its newline
        print()
        print("next")
        line.close()
        assert sys.stdout is term
    finally:
        sys.stdout = saved
    assert term.getvalue() == (f"{CLEAR}[s] 10%{CLEAR}a report\n{CLEAR}[s] 20%{CLEAR}next\n"
                               f"{CLEAR}[s] 20%\n")


def trials(n: int) -> list:
    return [Trial("__fake", stub=True) for _ in range(n)]


def test_off_a_terminal_one_timestamped_line_with_human_times(capsys):
    progress = Progress("s", total=2, every_s=0.0)  # capsys: stdout is no terminal
    progress.start -= 2670
    ts = trials(2)
    progress.on_trial_start(0, ts, ts[0])
    first = capsys.readouterr().out
    assert re.fullmatch(r"\d\d:\d\d:\d\d \[s\] 0/2 trials done, 1 running, 0 failed, "
                        r"0 members diverged, elapsed 44m3\ds, ETA \?\n", first), first
    progress.on_trial_result(0, ts, ts[0], {"progress": 0.5})  # 1 of 2 trials' work in 44m30s
    assert re.search(r"elapsed 44m3\ds, ETA 2h13m\n$", capsys.readouterr().out)


def test_on_a_terminal_one_line_redrawn_in_place(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    progress = Progress("s", total=2, every_s=0.0, live=True)
    progress.start -= 2670
    captured = sys.stdout
    ts = trials(2)
    progress.on_trial_result(0, ts, ts[0], {"progress": 0.5})
    progress.on_trial_start(0, ts, ts[1])  # within a second of the last: not redrawn
    print("[s] a study's report")
    progress.on_experiment_end(ts)
    assert sys.stdout is captured and progress.line is None  # the stream given back
    out = capsys.readouterr().out
    bar = ("[s] [####.............]   25%  0/2 trials  elapsed 44m30s  ETA 2h13m  "
           "0 running")
    assert out.startswith(CLEAR + bar + CLEAR + "[s] a study's report\n" + CLEAR + bar), out
    assert out.endswith("1 running\n") and out.count("\n") == 2  # the last line drawn stays
    assert all(len(part) <= 79 for part in out.replace("\n", CLEAR).split(CLEAR))


def test_quiet_shows_neither_the_line_nor_the_bar(capsys):
    import logging

    from icl_core.common.log import configured

    with configured(logging.WARNING):
        for live in (False, True):
            progress = Progress("s", total=2, every_s=0.0, live=live)
            ts = trials(2)
            progress.on_trial_start(0, ts, ts[0])
            progress.on_trial_complete(0, ts, ts[0])
            progress.on_experiment_end(ts)
    assert capsys.readouterr() == ("", "")
