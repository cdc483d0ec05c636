"""Object storage for real: sweeps, resume, quarantine, searches and regenerate against an S3
API (moto's server, started here; tests/s3server.py), through pyarrow's S3 filesystem."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import s3server
from conftest import tiny_member
from faults import race_two_drivers

from analysis.reading.coverage import missing_message
from icl_core.running.optuna_searcher import journal_path, study_name
from icl_core.spec.config import resolve_member
from icl_core.storage.claims import ObjectClaims, Owner, holder, plan_claims
from icl_core.storage.object_claims import unsupported
from icl_core.storage.store import (
    KEY_ENV,
    SECRET_ENV,
    SESSION_ENV,
    Store,
    credential_free,
    redacted,
    split_credentials,
)
from sweeps.depth_scaling import SWEEP

ROOT = Path(__file__).resolve().parent.parent


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


STUDY = ("depth_scaling", "least_squares")
ARGV = ["--preset", "smoke", "--study", "least_squares", "--no-figures"]
HASHES = {m.hash for m in SWEEP.study("least_squares").members("smoke")}


@pytest.fixture(scope="module")
def swept(ray_session, s3):
    """A bucket holding the depth sweep's smoke rows (4 configs), written by a sweep."""
    storage = s3.uri(s3.bucket())
    assert SWEEP.main(ARGV + ["--storage", storage]) == 0
    return storage


def test_a_smoke_sweep_writes_rows_to_s3_and_a_rerun_trains_nothing(s3, swept, capsys):
    bucket = swept.split("@", 1)[1].split("/", 1)[0]
    keys = {o["Key"] for o in s3.client().list_objects_v2(Bucket=bucket)["Contents"]}
    assert {f"results/depth_scaling/least_squares/rows/{h}.parquet" for h in HASHES} <= keys
    assert "results/depth_scaling/least_squares/study.json" in keys
    assert not [k for k in keys if "/claims/" in k]  # every claim released
    assert Store(swept).finished(*STUDY) == HASHES
    assert SWEEP.main(ARGV + ["--storage", swept]) == 0
    out = capsys.readouterr()
    assert "4 configs, 4 already finished, running 0" in out.out
    assert "claims: not on" not in out.err  # S3 keeps claims: no warning
    assert f"storage: s3://{bucket}/results?" in out.out  # the keys went to the environment
    assert "warning: --storage carries its keys" in out.err
    assert s3server.SECRET not in out.out + out.err  # the secret is never printed


def test_a_printed_uri_hides_its_secret():
    assert redacted("s3://AKIA:se%2Fcr%40et@bkt/r?endpoint_override=h:9&scheme=http") == \
        "s3://AKIA:***@bkt/r?endpoint_override=h:9&scheme=http"
    for uri in ("s3://bkt/r?region=x", "/home/u/results", "gs://b/p", "s3://AKIA@bkt/r"):
        assert redacted(uri) == uri
    # the message of a store without rows, and the command it suggests, carry no secret
    message = missing_message("depth_scaling", "least_squares", "s3://AKIA:sec@bkt/r",
                              "smoke", "s3://AKIA:sec@bkt/r")
    assert "sec@" not in message and message.count("s3://AKIA:***@bkt/r") == 2


def test_keys_in_a_uri_move_to_the_environment(monkeypatch):
    """An s3:// URI's keys (percent-encoded, as pyarrow reads them) leave the URI for the
    environment, with a session token of other keys dropped; other URIs and paths pass as
    they are."""
    for name in (KEY_ENV, SECRET_ENV, *SESSION_ENV):  # each put back after the test
        monkeypatch.setenv(name, "old")
    uri = "s3://AKIA:se%2Fcr%40et@bkt/r?endpoint_override=h:9&scheme=http&region=us-east-1"
    assert credential_free(uri) == "s3://bkt/r?endpoint_override=h:9&scheme=http&region=us-east-1"
    assert (os.environ[KEY_ENV], os.environ[SECRET_ENV]) == ("AKIA", "se/cr@et")
    assert not [name for name in SESSION_ENV if name in os.environ]
    assert Store(uri).uri == credential_free(uri)
    assert credential_free("s3://K:S@bkt?region=x") == "s3://bkt?region=x"
    for same in ("s3://bkt/r?region=x", "/home/u/results", "gs://a:b@c/d", "file:///tmp/r"):
        assert split_credentials(same) == (same, {})


MARK_KEY, MARK_SECRET = "AKIAMARKER", "SECRETMARKER123"  # moto takes any keys


def bucket_objects(s3, bucket: str) -> dict[str, bytes]:
    """{key: bytes} of every object in the bucket; a Parquet file's as its decoded rows and
    metadata too (its pages may be compressed)."""
    import pyarrow.parquet as pq

    client, out = s3.client(), {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for item in page.get("Contents", []):
            data = client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
            if item["Key"].endswith(".parquet"):
                table = pq.read_table(io.BytesIO(data))
                data += repr((table.to_pylist(), table.schema.metadata)).encode()
            out[item["Key"]] = data
    return out


def test_keys_in_a_storage_uri_reach_no_object_and_no_message(ray_session, s3, capfd,
                                                              monkeypatch):
    """A smoke sweep and a smoke search on a URI holding marker keys: the run warns once per
    command and works (the keys go to the environment, which Ray Tune hands to each trial's
    worker); no object written to the bucket (rows, manifests, Tune's state, the journal) and
    no line printed (the "best loss" line, "a search already exists") holds either key."""
    from icl.catalog import load_sweep

    for name in (KEY_ENV, SECRET_ENV, *SESSION_ENV):  # as they were, after the test
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    bucket = s3.bucket()
    uri = (f"s3://{MARK_KEY}:{MARK_SECRET}@{bucket}/x?endpoint_override=127.0.0.1:{s3.port}"
           f"&scheme=http&region={s3server.REGION}")
    assert split_credentials(uri) == (uri.replace(f"{MARK_KEY}:{MARK_SECRET}@", ""),
                                      {KEY_ENV: MARK_KEY, SECRET_ENV: MARK_SECRET})
    assert SWEEP.main(["--preset", "smoke", "--study", "least_squares", "--storage", uri,
                       "--no-figures"]) == 0
    hpo = load_sweep("hpo_lr")
    argv = ["--preset", "smoke", "--storage", uri, "--no-figures", "--num-samples"]
    assert hpo.main(argv + ["1"]) == 0
    assert hpo.main(argv + ["2"]) == 2  # begun: refused without --resume, its path named
    out, err = capfd.readouterr()
    assert "best loss" in out and "a search already exists at s3://" in err
    assert err.count("warning: --storage carries its keys") == 3
    objects = bucket_objects(s3, bucket)
    assert "x/depth_scaling/least_squares/study.json" in objects
    assert "x/hpo_lr/width_lr/optuna.journal" in objects
    assert any(k.startswith("x/depth_scaling/tune/") and k.endswith("params.json")
               for k in objects)
    assert any(k.startswith("x/hpo_lr/width_lr/tune/") for k in objects)
    hits = [k for k, data in objects.items() if MARK_SECRET.encode() in data
            or MARK_KEY.encode() in data]
    assert not hits, hits
    assert MARK_SECRET not in out + err and MARK_KEY not in out + err


def test_regenerate_draws_figures_from_s3(swept, tmp_path, capsys):
    from icl.commands.regenerate import main

    assert main(["depth_scaling", "--storage", swept, "--out", str(tmp_path), "--n-boot",
                 "20"]) == 0
    assert (tmp_path / "depth_scaling" / "least_squares" / "depth.png").stat().st_size > 0
    assert (tmp_path / "depth_scaling" / "least_squares" / "fits.md").exists()


def test_a_corrupt_row_object_is_quarantined_with_its_reason_and_retrained(s3, swept, capsys):
    client, store = s3.client(), Store(swept)
    bucket, prefix = store.root.split("/", 1)
    bad = sorted(HASHES)[0]
    key = f"{prefix}/depth_scaling/least_squares/rows/{bad}.parquet"
    client.put_object(Bucket=bucket, Key=key, Body=b"PAR1 not parquet at all" * 20)
    assert SWEEP.main(ARGV + ["--storage", swept]) == 0
    out = capsys.readouterr()
    assert "4 configs, 3 already finished, running 1" in out.out
    assert f"untrusted row file {store.root}/depth_scaling/least_squares/rows/{bad}" in out.err
    listed = client.list_objects_v2(Bucket=bucket,
                                    Prefix=f"{prefix}/depth_scaling/least_squares/quarantine/")
    moved = sorted(o["Key"] for o in listed["Contents"] if not o["Key"].endswith("/"))
    assert len(moved) == 2 and moved[0].endswith(f"{bad}.parquet")  # the file, its reason
    assert client.get_object(Bucket=bucket, Key=moved[0])["Body"].read() == \
        b"PAR1 not parquet at all" * 20
    reason = client.get_object(Bucket=bucket, Key=moved[1])["Body"].read().decode()
    assert moved[1].endswith(".reason.txt") and "unreadable" in reason
    assert store.finished(*STUDY) == HASHES  # retrained

A, B = Owner("host-a", 11, "driver-a"), Owner("host-b", 22, "driver-b")


def test_claims_on_s3_are_conditional_writes(s3, storage):
    """Take, skip a live claim, take over an expired one (If-Match on the ETag read: of two
    drivers taking it over, one wins), lose it on refresh, release only one's own."""
    store = Store(storage)
    a, b = ObjectClaims(store, "sw", "st", A), ObjectClaims(store, "sw", "st", B)
    assert unsupported(store) is None and unsupported(store, a) is None  # moto honours them
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
    assert a.prefix.endswith("sw/st/claims")  # where `icl claims` says a claim object lies


def test_icl_claims_on_s3_says_where_the_claim_objects_are(storage, capsys):
    from icl.console import main as icl

    assert icl(["claims", "depth_scaling", "--storage", storage]) == 0
    out = capsys.readouterr().out
    assert "<sweep>/<study>/claims/<config hash>.claim" in out and "delete it" in out


def test_a_squatted_claim_on_s3_expires_a_lease_after_it_was_written(s3, storage):
    """The local rule on objects too: an "expires" in the year 3000 is not believed; the claim
    counts as expiring a lease length after the object's LastModified, and says so."""

    from icl_core.storage.claims import TTL_S

    store = Store(storage)
    a = ObjectClaims(store, "sw", "st", A)
    squat = {"host": "far-host", "pid": 4242, "driver": "far", "token": "t",
             "expires": 32503680000.0}  # 3000-01-01
    a.client.put_object(Bucket=a.bucket, Key=a.key("h9"), Body=json.dumps(squat).encode())
    claim = a.read("h9")
    assert claim["squatted"] and abs(claim["expires"] - (time.time() + TTL_S)) < 60
    assert a.take("h9") == "far-host:4242"  # young: still held, for at most a lease
    a.release()


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


@pytest.mark.slow  # two Tune searches (3 trials): ~50 s on 2 busy cores
def test_a_search_on_s3_keeps_its_journal_and_resumes(ray_session, s3, storage, capsys):
    """A smoke Optuna search (sweeps/hpo_lr.py): its journal is an object beside the rows,
    read back by a fresh process, and --resume extends the search from it."""
    import optuna

    from icl.catalog import load_sweep
    from icl_core.storage import journal

    sweep = load_sweep("hpo_lr")
    (point,) = sweep.study("width_lr").for_preset("smoke").points("smoke")
    argv = ["--preset", "smoke", "--storage", storage, "--no-figures", "--num-samples", "2"]
    assert sweep.main(argv) == 0
    assert "best loss" in capsys.readouterr().out
    bucket = storage.split("@", 1)[1].split("/", 1)[0]
    key = "results/hpo_lr/width_lr/optuna.journal"
    assert s3.client().head_object(Bucket=bucket, Key=key)["ContentLength"] > 0

    def trials():
        journal._OPEN.clear()  # as a new process would: read from S3 again
        study = optuna.load_study(study_name=study_name("hpo_lr", "width_lr", point), storage=journal.journal_storage(
            journal_path(Store(storage).uri, "hpo_lr", "width_lr")))
        return study.trials

    assert len(trials()) == 2 and all(t.state.is_finished() for t in trials())
    assert sweep.main(argv) == 0  # finished: said, nothing run
    assert "finished: 2 of 2 Optuna trials" in capsys.readouterr().out
    journal._OPEN.clear()
    assert sweep.main(argv + ["--resume", "--num-samples", "3"]) == 0
    assert "extending the search from 2 to 3 trials" in capsys.readouterr().out
    assert len(trials()) == 3 and all(t.state.is_finished() for t in trials())


def row_versions(s3, bucket: str, study: str) -> dict[str, int]:
    """{config hash: how many times its row object was written} (a versioned bucket)."""
    pages = s3.client().get_paginator("list_object_versions").paginate(
        Bucket=bucket, Prefix=f"results/{study}/rows/")
    keys = [v["Key"] for page in pages for v in page.get("Versions", [])]
    return dict(Counter(k.rsplit("/", 1)[1].removesuffix(".parquet") for k in keys
                        if k.endswith(".parquet")))


def versioned_bucket(s3) -> str:
    bucket = s3.bucket()
    s3.client().put_bucket_versioning(Bucket=bucket,
                                      VersioningConfiguration={"Status": "Enabled"})
    return bucket


@pytest.mark.slow  # ~13 s; the fast suite keeps S3's conditional writes and the local race
def test_two_drivers_racing_for_the_same_configs_on_s3_train_each_once(s3):
    """Two processes claim the same six configs at the same instant (no Ray: the claims race
    itself); each config is trained, and its row object written, exactly once."""
    bucket = versioned_bucket(s3)
    storage = s3.uri(bucket)
    outs = race_two_drivers(storage)
    trained = [h for out in outs for h in out["trained"]]
    hashes = {resolve_member(tiny_member(seed=s)).hash for s in range(6)}
    assert sorted(trained) == sorted(hashes)  # each exactly once, by one driver or the other
    assert any(out["others"] for out in outs)  # they did race: one saw the other's claims
    assert row_versions(s3, bucket, "sw/st") == dict.fromkeys(hashes, 1)
    assert Store(storage).finished("sw", "st") == hashes
    claims = s3.client().list_objects_v2(Bucket=bucket, Prefix="results/sw/st/claims/")
    assert not [o for o in claims.get("Contents", []) if o["Key"].endswith(".claim")]


def two_drivers(s3, module: str, args, bucket: str) -> list[subprocess.Popen]:
    """`python -m <module> <args> --storage s3://<bucket>/results` twice at once, each its own
    local Ray, the server and the credentials in the environment."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(s3.env(), RAY_AUTH_MODE="token", PYTHONPATH=str(ROOT))
    argv = [sys.executable, "-m", module, *args, "--storage", f"s3://{bucket}/results"]
    return [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env, cwd=ROOT) for _ in range(2)]


@pytest.mark.slow
def test_two_sweep_drivers_started_at_once_on_s3_train_each_config_once(s3):
    """Two `python -m sweeps.depth_scaling` processes (each its own local Ray), started at
    once on one S3 storage given as a plain s3:// URI, the server and the credentials in the
    environment (AWS_ENDPOINT_URL, ...): together they train the study's 4 configs once."""
    bucket = versioned_bucket(s3)
    procs = two_drivers(s3, "sweeps.depth_scaling", ARGV, bucket)
    outs = [p.communicate(timeout=500) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    running = [int(re.search(r"running (\d+)", out).group(1)) for out, _ in outs]
    assert sum(running) == 4, [out for out, _ in outs]
    assert not any("claims: not on" in err for _, err in outs)
    assert row_versions(s3, bucket, "depth_scaling/least_squares") == dict.fromkeys(HASHES, 1)


def test_a_search_lease_on_s3_refuses_a_second_driver_and_rereads_the_journal(s3, storage):
    """One driver per search on S3: the lease object `<search>/claims/optuna.journal.claim`
    (conditional writes) held by another driver refuses this one in one line naming the holder,
    its expiry and the object to delete if that driver is gone; once free, this driver holds
    it, and reads the journal from the bucket again: trials another driver uploaded after this
    process first read the journal are kept, not overwritten by a stale copy."""
    import optuna

    from icl_core.running.search import search_lease
    from icl_core.spec.config import ConfigError
    from icl_core.storage import journal

    store = Store(storage)
    uri = journal_path(store.uri, "sw", "se")
    other = ObjectClaims(store, "sw", "se", A)
    assert other.take("optuna.journal") is None
    with pytest.raises(ConfigError) as refused:
        with search_lease(storage, "sw", "se", uri, "sw/se@x"):
            raise AssertionError("ran while another driver holds the search")
    line = str(refused.value)
    bucket = store.root.split("/", 1)[0]
    assert "\n" not in line and "host-a:11 holds its lease (it expires at " in line
    assert f"free it now: delete s3://{bucket}/results/sw/se/claims/optuna.journal.claim" in line
    assert s3server.SECRET not in line

    optuna.create_study(study_name="s", storage=journal.journal_storage(uri))  # read here
    journal.flush_journals()
    theirs = journal.MirroredJournal(uri)  # another driver's working copy, read after ours
    optuna.load_study(study_name="s", storage=optuna.storages.JournalStorage(theirs)).add_trial(
        optuna.trial.create_trial(params={}, distributions={}, value=1.0))
    theirs.flush()  # uploaded: the bucket now holds a trial this process's copy lacks
    other.release()
    with search_lease(storage, "sw", "se", uri, "sw/se@x"):
        assert ObjectClaims(store, "sw", "se", B).read("optuna.journal")["pid"] == os.getpid()
        mine = optuna.load_study(study_name="s", storage=journal.journal_storage(uri))
        assert len(mine.trials) == 1  # the bucket's journal, not this process's first copy
        mine.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=2.0))
    journal._OPEN.clear()  # as a new process: both trials in the bucket, the lease gone
    assert len(optuna.load_study(study_name="s", storage=journal.journal_storage(uri)).trials) == 2
    left = s3.client().list_objects_v2(Bucket=bucket, Prefix="results/sw/se/claims/")
    assert not [o for o in left.get("Contents", []) if o["Key"].endswith(".claim")]


RESUMING = ["--preset", "smoke", "--no-figures", "--resume", "--num-samples", "6"]


@pytest.mark.slow  # two drivers, each its own local Ray: ~100 s on 2 busy cores
def test_two_drivers_resuming_one_search_on_s3_lose_no_trial(s3):
    """A 2-trial search (sweeps/hpo_lr.py, smoke; begun here with plain Optuna, no Ray), then
    two `python -m sweeps.hpo_lr --resume --num-samples 6` processes at once on the same S3
    storage (each its own local Ray): every trial that ran is in the journal; the driver that
    does not extend it is refused with one line (or, started after the first ended, finds the
    search finished). Before the search's lease each ran 4 trials and the journal kept 6."""
    import optuna

    from icl.catalog import load_sweep
    from icl_core.storage import journal

    bucket = s3.bucket()
    storage = s3.uri(bucket)
    sweep = load_sweep("hpo_lr")
    (point,) = sweep.study("width_lr").for_preset("smoke").points("smoke")
    uri = journal_path(Store(storage).uri, "hpo_lr", "width_lr")
    assert sweep.main(["--preset", "smoke", "--no-figures", "--storage", storage,
                       "--num-samples", "2", "--optuna-journal", uri]) == 0
    journal.flush_journals()

    def trials():
        journal._OPEN.clear()  # as a new process would: read from S3 again
        return optuna.load_study(study_name=study_name("hpo_lr", "width_lr", point),
                                 storage=journal.journal_storage(uri)).trials

    assert len(trials()) == 2
    procs = two_drivers(s3, "sweeps.hpo_lr", RESUMING, bucket)
    outs = [(p.communicate(timeout=500), p.returncode) for p in procs]
    extended = [out for (out, _), rc in outs if "extending the search from 2 to 6 trials" in out]
    assert len(extended) >= 1, outs
    for (out, err), rc in outs:
        refused = [line for line in err.splitlines() if "is run by another driver" in line]
        assert (rc == 0 and not refused) or (rc == 2 and len(refused) == 1), (out, err[-3000:])
        if refused:
            assert refused[0].startswith("error: [hpo_lr/width_lr@") and "holds its lease" in \
                refused[0] and "optuna.journal.claim" in refused[0]
    ran = trials()
    assert len(ran) == 2 + 4 * len(extended), outs  # every trial that ran is kept
    assert all(t.state.is_finished() for t in ran)
    left = s3.client().list_objects_v2(Bucket=bucket, Prefix="results/hpo_lr/width_lr/claims/")
    assert not [o for o in left.get("Contents", []) if o["Key"].endswith(".claim")]


def test_a_trial_cut_on_s3_goes_on_from_its_checkpoint_objects(storage, tmp_path, monkeypatch):
    """A trial (run_without_ray's, as a Tune grid trial's) keeps its members' checkpoints as
    objects beside its rows, and the next run goes on from them to an uninterrupted run's rows
    (a store that is a bucket)."""
    from test_store_checkpoints import cut_and_resumed

    cut_and_resumed(str(tmp_path / "whole"), storage, monkeypatch)
