"""How a long run shows where it is: durations a person reads (`span`: 42s, 3m07s, 1h45m), the
progress bar's text (`progress_bar`) and the terminal line it is redrawn on (`LiveLine`).

    >>> progress_bar(17, 40, 70, trials=(17, 65), elapsed_s=2670, eta_s=6300)
    '[########.............]   42%  17/65 trials  elapsed 44m30s  ETA 1h45m'

Pure text and plain streams: no Ray (icl_core.running.ray_launch.Progress draws it).
"""

from __future__ import annotations

import io
import threading

BAR_CELLS = (10, 30)  # the bar's fewest and most cells; where fewer fit, the text goes alone
CLEAR = "\r\x1b[K"  # back to the line's start, erase to its end (ANSI, every terminal since VT100)


def span(seconds: float) -> str:
    """A duration as a person reads it: 42s, 3m07s, 1h45m (whole seconds, never negative)."""
    s = int(max(0.0, seconds))
    return f"{s // 3600}h{s // 60 % 60:02d}m" if s >= 3600 else \
        f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def progress_bar(done_cost: float, total_cost: float, width: int, *,
                 trials: tuple[int, int] | None = None, elapsed_s: float | None = None,
                 eta_s: float | None = None, note: str = "") -> str:
    """One line of at most `width` characters: a bar filled by done_cost / total_cost (cost,
    not count: planned seconds weigh each trial), the percentage (rounded down: 100% only when
    all is done), `trials` (done, total), the elapsed time, the ETA ("?" when None: not known
    yet) and `note`. Narrower than the text and BAR_CELLS[0] cells, the bar is left out, then
    the text is cut at `width`."""
    share = min(1.0, max(0.0, done_cost / total_cost)) if total_cost > 0 else 1.0
    parts = [f"{int(share * 100 + 1e-9):3d}%"]
    if trials is not None:
        parts.append(f"{trials[0]}/{trials[1]} trials")
    if elapsed_s is not None:
        parts.append(f"elapsed {span(elapsed_s)}")
    parts.append(f"ETA {'?' if eta_s is None else span(eta_s)}")
    if note:
        parts.append(note)
    text = "  ".join(parts)
    cells = min(BAR_CELLS[1], width - len(text) - 4)  # "[" cells "]  " text
    if cells < BAR_CELLS[0]:
        return text[:max(0, width)]
    filled = int(share * cells + 1e-9)
    return f"[{'#' * filled}{'.' * (cells - filled)}]  {text}"


class LiveLine:
    """A line redrawn in place at the bottom of a terminal, under whatever else is printed.

    `open()` routes sys.stdout (and sys.stderr, when it is the terminal too) through it until
    `close()`: a line printed by anyone (a study's report, a worker's log) first erases the
    drawn line, is written, and the drawn line comes back below it. `draw(text)` replaces it.
    """

    def __init__(self, term):
        self.term = term  # the terminal's stream (sys.stdout when opened)
        self.text = ""  # the line drawn, "" before the first draw
        self.shown = False  # whether it is on screen now (not erased by other output)
        self.pending = False  # a line printed through it is not ended yet: no redraw over it
        self.lock = threading.RLock()  # Ray prints workers' logs from a thread of its own
        self.saved: tuple | None = None

    def open(self) -> LiveLine:
        import sys

        self.saved = (sys.stdout, sys.stderr)
        sys.stdout = _Through(self, sys.stdout)
        if _isatty(sys.stderr):
            sys.stderr = _Through(self, sys.stderr)
        return self

    def close(self) -> None:
        """Leave the line drawn last on screen, end it, give the streams back."""
        import sys

        with self.lock:
            if self.shown:
                self.term.write("\n")
                self.term.flush()
            self.shown = False
            if self.saved is not None:
                sys.stdout, sys.stderr = self.saved
                self.saved = None

    def draw(self, text: str) -> None:
        with self.lock:
            self.text = text
            if self.pending:
                return  # drawn after that line's newline
            self.term.write(CLEAR + text)
            self.term.flush()
            self.shown = True

    def erase(self) -> None:
        if self.shown:
            self.term.write(CLEAR)
            self.term.flush()
            self.shown = False

    def redraw(self) -> None:
        if self.text and not self.shown:
            self.draw(self.text)


class _Through(io.TextIOBase):
    """A stream written through a LiveLine: its line erased before, redrawn after a newline."""

    def __init__(self, line: LiveLine, out):
        self.line, self.out = line, out

    def write(self, text: str) -> int:
        with self.line.lock:
            if not text:
                return 0
            self.line.erase()
            self.out.write(text)
            self.line.pending = not text.endswith("\n")
            if not self.line.pending:
                self.out.flush()
                self.line.redraw()
        return len(text)

    def flush(self) -> None:
        self.out.flush()

    def isatty(self) -> bool:
        return _isatty(self.out)

    @property
    def encoding(self):
        return getattr(self.out, "encoding", "utf-8")

    def fileno(self) -> int:
        return self.out.fileno()

    def __getattr__(self, name):  # encoding, errors, buffer, ...: the stream's own
        return getattr(self.out, name)


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no such method, or a closed stream
        return False
