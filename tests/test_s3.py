"""Object storage for real: sweeps, resume, quarantine, searches and regenerate against an S3
API (moto's server, started here; tests/s3server.py), through pyarrow's S3 filesystem."""

from __future__ import annotations

import pytest
import s3server

from icl_core.claims import Owner, holder, plan_claims
from icl_core.object_claims import ObjectClaims, open_object_claims
from icl_core.searcher import journal_path
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


A, B = Owner("host-a", 11, "driver-a"), Owner("host-b", 22, "driver-b")


def test_claims_on_s3_are_conditional_writes(s3, storage):
    """Take, skip a live claim, take over an expired one (If-Match on the ETag read: of two
    drivers taking it over, one wins), lose it on refresh, release only one's own."""
    store = Store(storage)
    a, why = open_object_claims(store, "sw", "st", A)
    assert why == "" and isinstance(a, ObjectClaims)
    b = open_object_claims(store, "sw", "st", B)[0]
    assert a.take("h1") is None and a.take("h1") is None  # its own claim: refreshed
    assert b.take("h1") == "host-a:11" and "h1" not in b.held
    assert holder(store, "sw", "st", "h1", "driver-b") == "host-a:11"
    assert holder(store, "sw", "st", "h1", "driver-a") is None

    dead = ObjectClaims(store, "sw", "st", A, ttl=-1.0)  # a driver whose claims expired
    assert dead.take("h2") is None
    assert holder(store, "sw", "st", "h2", "driver-b") is None
    expired, etag = b._get("h2")
    c = ObjectClaims(store, "sw", "st", Owner("host-c", 33, "driver-c"))
    assert b.take("h2") is None and "h2" in b.held  # taken over
    with pytest.raises(c.ClientError) as lost:  # c read the same expired claim: it loses
        c._put("h2", IfMatch=etag)
    assert lost.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert b.read("h2")["driver"] == "driver-b"
    dead.refresh()  # the old holder learns it lost the claim
    assert "h2" not in dead.held
    dead.release_one("h2")  # and never deletes b's claim
    assert b.read("h2")["driver"] == "driver-b"
    a.release()
    b.release()
    listed = s3.client().list_objects_v2(Bucket=a.bucket, Prefix=a.prefix)
    assert listed.get("KeyCount", 0) == 0  # all released, the probe removed


def test_claims_where_conditional_writes_are_not_supported_are_skipped_with_the_reason(
        tmp_path, capsys):
    import pyarrow.fs as pafs

    store = Store(str(tmp_path))
    store.fs, store.uri = pafs.SubTreeFileSystem(str(tmp_path), store.fs), "mem://x"
    claims, mine, others = plan_claims(store, "sw", "st", ["h1"])
    assert mine == ["h1"] and others == {} and not claims.held
    assert ("claims: not on mem://x (mem:// stores keep no claims here (S3 does, by "
            "conditional writes)): two drivers of sw/st may train a config twice"
            ) in capsys.readouterr().err


def test_a_search_on_s3_keeps_its_journal_and_resumes(ray_session, s3, storage, capsys):
    import optuna

    from icl_core import journal
    from icl_core.catalog import load_sweep

    sweep = load_sweep("hpo_lr")
    (point,) = sweep.study("width_lr").for_preset("smoke").points("smoke")
    argv = ["--preset", "smoke", "--storage", storage, "--no-figures"]
    assert sweep.main(argv) == 0
    assert "best loss" in capsys.readouterr().out
    bucket = storage.split("@", 1)[1].split("/", 1)[0]
    key = "results/hpo_lr/width_lr/optuna.journal"
    assert s3.client().head_object(Bucket=bucket, Key=key)["ContentLength"] > 0

    def trials():
        journal._OPEN.clear()  # as a new process would: read from S3 again
        study = optuna.load_study(study_name=f"width_lr-{point.hash}", storage=journal.journal_storage(
            journal_path(Store(storage).uri, "hpo_lr", "width_lr")))
        return study.trials

    assert len(trials()) == 3 and all(t.state.is_finished() for t in trials())
    assert sweep.main(argv) == 0  # finished: said, nothing run
    assert "finished: 3 of 3 Optuna trials" in capsys.readouterr().out
    journal._OPEN.clear()
    assert sweep.main(argv + ["--resume", "--num-samples", "4"]) == 0
    assert "extending the search from 3 to 4 trials" in capsys.readouterr().out
    assert len(trials()) == 4 and all(t.state.is_finished() for t in trials())
