"""Loaders take names, not paths: a path to a Python file is refused before anything imports it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from icl import catalog
from icl.commands.regenerate import main as regenerate_main


@pytest.fixture
def evil(tmp_path) -> tuple[Path, Path]:
    """(an evil.py that writes a marker when imported, the marker)."""
    marker = tmp_path / "MARKER"
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    return tmp_path / "x" / "evil", marker


def relative(target: Path, start: Path) -> str:
    return os.path.relpath(target, start)


@pytest.mark.parametrize("flags", [[], ["--from-sweeps"]])
def test_regenerate_refuses_a_path_without_importing_it(evil, tmp_path, capsys, flags):
    target, marker = evil
    for name in (relative(target, catalog.SWEEPS_DIR), str(target)):
        assert regenerate_main([name, "--storage", str(tmp_path / "r"), *flags]) == 2
        err = capsys.readouterr().err
        assert "not a sweep name" in err or "not the name of a sweep file" in err, err
    assert not marker.exists()


def test_the_catalog_refuses_a_path_out_of_its_folder_without_importing_it(
        evil, tmp_path, monkeypatch):
    target, marker = evil
    folder = tmp_path / "sweeps"
    folder.mkdir()
    monkeypatch.setattr(catalog, "SWEEPS_DIR", folder)  # a sweep folder by file location
    for name in (relative(target, folder), str(target), "evil"):
        with pytest.raises(KeyError, match="not the name of a sweep file"):
            catalog.load_sweep(name)
    assert not marker.exists()
