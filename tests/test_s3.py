"""Object storage for real: sweeps, resume, quarantine, searches and regenerate against an S3
API (moto's server, started here; tests/s3server.py), through pyarrow's S3 filesystem."""

from __future__ import annotations

import pytest
import s3server

from icl_core.store import Store
from sweeps.depth_scaling import SWEEP


@pytest.fixture(scope="session")
def s3():
    try:
        server = s3server.start()
    except RuntimeError as exc:
        pytest.skip(f"no S3 server: {exc}")
    yield server
    server.proc.terminate()
    server.proc.wait(timeout=10)


@pytest.fixture
def storage(s3):
    return s3.uri(s3.bucket())


def test_a_smoke_sweep_writes_rows_to_s3_and_a_rerun_trains_nothing(ray_session, storage,
                                                                     tmp_path, capsys):
    argv = ["--preset", "smoke", "--study", "least_squares", "--storage", storage,
            "--no-figures"]
    assert SWEEP.main(argv) == 0
    out = capsys.readouterr().out
    assert "4 configs, 0 already finished, running 4" in out
    members = SWEEP.study("least_squares").members("smoke")
    assert Store(storage).finished("depth_scaling", "least_squares") == {m.hash for m in members}
    assert SWEEP.main(argv) == 0
    assert "4 configs, 4 already finished, running 0" in capsys.readouterr().out
