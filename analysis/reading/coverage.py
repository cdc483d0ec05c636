"""What a read of a sweep's rows found (`Coverage`: expected, read, skipped, statuses) and what
to say when there is nothing to read (`MissingResults`, `missing_message`: the command that
writes the rows). Read by analysis.reading.store, which re-exports them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from icl_core.spec.study import PRESETS
from icl_core.storage.store import redacted

FOLDERS = ("rows", "failed")  # finished (ok / diverged) and failed members
DEFAULT_STORAGE = "results"


class MissingResults(FileNotFoundError):
    """No row file of the requested sweep/study exists (or none could be read)."""


@dataclass
class Coverage:
    """What the reader found: trials expected, files read per folder, files skipped (path,
    reason), rows, members by status, expected config hashes without a file."""

    expected: int | None = None  # the plan's size, when the caller passed it
    found: int = 0  # row files found
    read: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FOLDERS, 0))
    skipped: list[tuple[str, str]] = field(default_factory=list)
    n_rows: int = 0
    statuses: dict[str, int] = field(default_factory=dict)  # members read, by status
    missing: list[str] = field(default_factory=list)  # expected hashes with no row file

    @property
    def n_expected(self) -> int:
        """Trials expected: the plan's size if known, else the row files found."""
        return self.expected if self.expected is not None else self.found

    @property
    def n_read(self) -> int:
        return sum(self.read.values())

    def line(self, label: str) -> str:
        source = "in the plan" if self.expected is not None else "files found"
        parts = ", ".join(f"{n} {folder}/" for folder, n in self.read.items())
        text = (f"[{label}] trials: {self.n_expected} expected ({source}), {self.n_read} read "
                f"({parts}), {len(self.skipped)} skipped; {self.n_rows} rows")
        if self.statuses:
            text += "; " + ", ".join(f"{n} {s}" for s, n in sorted(self.statuses.items()))
        if self.expected is not None and self.n_read + len(self.skipped) < self.expected:
            text += f"; {self.expected - self.n_read - len(self.skipped)} without a row file"
        return text

    def to_dict(self) -> dict:
        return {"expected": self.n_expected, "found": self.found, "read": self.n_read,
                "skipped": len(self.skipped), "rows": self.n_rows, **{
                    f"n_{s}": n for s, n in self.statuses.items()}}


def produce_command(sweep: str, study: str | None = None, preset: str | None = None,
                    storage: str | None = None) -> str:
    """The command that writes the rows of `sweep` (and `study`) to `storage`."""
    cmd = f"python sweeps/{sweep}.py"
    if study:
        cmd += f" --study {study}"
    cmd += f" --preset {preset}" if preset else ""
    if storage and storage != DEFAULT_STORAGE:
        cmd += f" --storage {redacted(storage)}"
    return cmd


def missing_message(sweep: str, study: str | None, uri: str, preset: str | None = None,
                    storage: str | None = None, detail: str = "") -> str:
    label = f"{sweep}/{study}" if study else sweep
    hint = "" if preset else f"  (choose --preset {' | '.join(PRESETS)}; the default is cpu)"
    return (f"no result rows for {label} under {redacted(uri)}{detail}. Produce them with:\n"
            f"  {produce_command(sweep, study, preset, storage)}{hint}")


def expected_hashes(manifest: dict, preset: str | None) -> list[str] | None:
    """The config hashes the plan of `preset` expects (a study's manifest, study.json; None:
    no preset, or a study without a grid plan: a search or an adaptive study)."""
    if not preset or manifest.get("kind") != "grid":
        return None
    plans = manifest["expected"]
    if preset not in plans:
        raise ValueError(f"--preset: unknown {preset!r}; valid choices: {', '.join(plans)}")
    return plans[preset]
