"""One driver per config: claims in the store, for real (files, processes)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
from conftest import tiny_member
from faults import race_two_drivers

from icl_core.running.trial import TrialSpec, run_trial
from icl_core.spec.config import resolve_member
from icl_core.storage.claims import Claims, Owner, holder, plan_claims, skipped_line
from icl_core.storage.store import Store

ROOT = Path(__file__).resolve().parent.parent
A, B = Owner("host-a", 11, "driver-a"), Owner("host-b", 22, "driver-b")


def test_a_live_claim_is_skipped_by_another_driver_and_an_expired_one_is_taken_over(tmp_path):
    store = Store(str(tmp_path))
    a = Claims(store, "sw", "st", A)
    assert a.take("h1") is None and a.take("h1") is None  # its own claim: refreshed
    b = Claims(store, "sw", "st", B)
    assert b.take("h1") == "host-a:11" and "h1" not in b.held
    assert holder(store, "sw", "st", "h1", "driver-b") == "host-a:11"
    assert holder(store, "sw", "st", "h1", "driver-a") is None
    assert skipped_line({"h1": "host-a:11", "h2": "host-a:11"}) == \
        "2 configs claimed by another driver (host-a:11), skipped"

    dead = Claims(store, "sw", "st", A, ttl=-1.0)  # a driver whose claims have expired
    assert dead.take("h2") is None
    assert holder(store, "sw", "st", "h2", "driver-b") is None
    assert b.take("h2") is None and "h2" in b.held  # taken over
    assert json.loads((tmp_path / "sw/st/claims/h2.claim").read_text())["driver"] == "driver-b"
    assert not list((tmp_path / "sw/st/claims").glob("*.takeover-*"))
    dead.refresh()  # the old holder learns it lost the claim
    assert "h2" not in dead.held
    a.release()
    b.release()
    assert not list((tmp_path / "sw/st/claims").glob("*.claim"))


def test_a_member_claimed_by_another_live_driver_is_not_trained(tmp_path):
    store = Store(str(tmp_path))
    member = resolve_member(tiny_member())
    Claims(store, "sw", "st", A).take(member.hash)
    spec = TrialSpec("sw", "st", str(tmp_path), [member.to_dict()], driver="driver-b")
    assert run_trial(spec) == {member.hash: "claimed"}
    assert store.finished("sw", "st") == set()
    spec.driver = "driver-a"  # the claim's own driver trains it
    assert run_trial(spec) == {member.hash: "ok"}


def test_the_refresher_releases_finished_members_and_extends_only_the_others(tmp_path):
    store = Store(str(tmp_path))
    members = [resolve_member(tiny_member(seed=s)) for s in range(3)]
    done, failed, running = (m.hash for m in members)
    claims = Claims(store, "sw", "st", A)
    for h in (done, failed, running):
        assert claims.take(h) is None
    folder = tmp_path / "sw/st/claims"
    for name in os.listdir(folder):  # claims written a while ago
        os.utime(folder / name, (time.time() - 100, time.time() - 100))
    spec = TrialSpec("sw", "st", str(tmp_path), [members[0].to_dict()], driver="driver-a")
    assert run_trial(spec) == {done: "ok"}  # its row file is written
    store.write_rows(store.rows_path("sw", "st", failed, "failed"),
                     pl.read_parquet(store.rows_path("sw", "st", done)).with_columns(
                         config_hash=pl.lit(failed)).to_arrow())  # a failed/ record
    claims.refresh()
    assert claims.held == {failed, running}  # a failed member may be trained again
    assert sorted(p.name for p in folder.glob("*.claim")) == sorted(
        [f"{failed}.claim", f"{running}.claim"])
    assert all(time.time() - p.stat().st_mtime < 50 for p in folder.glob("*.claim"))
    claims.release()


def test_two_drivers_started_at_once_train_each_config_exactly_once(tmp_path):
    outs = race_two_drivers(str(tmp_path))
    trained = [h for out in outs for h in out["trained"]]
    hashes = {resolve_member(tiny_member(seed=s)).hash for s in range(6)}
    assert sorted(trained) == sorted(hashes)  # each exactly once, by one driver or the other
    assert Store(str(tmp_path)).finished("sw", "st") == hashes
    assert not list((tmp_path / "sw/st/claims").glob("*.claim"))  # all released


def test_planning_again_skips_finished_and_claimed_configs(tmp_path):
    store = Store(str(tmp_path))
    member = resolve_member(tiny_member())
    run_trial(TrialSpec("sw", "st", str(tmp_path), [member.to_dict()]))
    Claims(store, "sw", "st", A).take("other")
    claims, mine, others = plan_claims(store, "sw", "st", [member.hash, "other", "free"], B)
    assert mine == ["free"] and others == {"other": "host-a:11"}
    claims.release()


def test_a_killed_drivers_claims_on_this_host_are_taken_over_at_once(tmp_path):
    """A driver SIGKILLed mid-sweep leaves unexpired claims; the next run on the same host sees
    its process is gone and trains those configs (docs/store.md: a re-run resumes a killed driver)."""
    import socket

    store = Store(str(tmp_path))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead_pid = int(gone.stdout)  # that process has exited
    here = socket.gethostname()
    killed = Claims(store, "sw", "st", Owner(here, dead_pid, "driver-killed"))
    assert killed.take("h1") is None
    alive = Claims(store, "sw", "st", Owner(here, os.getppid(), "driver-alive"))
    assert alive.take("h2") is None  # a running process on this host: its claim holds
    me = Claims(store, "sw", "st", B)
    assert me.take("h1") is None and "h1" in me.held  # taken over before it expired
    assert me.take("h2") == f"{here}:{os.getppid()}"
    far = Claims(store, "sw", "st", Owner("another-host", dead_pid, "driver-far"))
    assert far.take("h3") is None
    assert me.take("h3") == f"another-host:{dead_pid}"  # another host: only expiry tells


def squat(store: Store, sweep: str, study: str, h: str, age_s: float) -> Path:
    """A claim from another host with "expires" in the year 3000, its file last written
    `age_s` ago."""
    folder = Path(store.study_dir(sweep, study)) / "claims"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{h}.claim"
    path.write_text(json.dumps({"host": "far-host", "pid": 4242, "driver": "squatter",
                                "token": "t-squat", "expires": 32503680000.0}))  # 3000-01-01
    os.utime(path, (time.time() - age_s, time.time() - age_s))
    return path


def test_an_expiry_further_than_a_lease_ahead_counts_from_the_files_age(tmp_path):
    from icl_core.storage.claims import TTL_S

    store = Store(str(tmp_path))
    squat(store, "sw", "st", "fresh", age_s=10)
    squat(store, "sw", "st", "old", age_s=TTL_S + 5)
    b = Claims(store, "sw", "st", B)
    fresh = b.read("fresh")
    assert fresh["squatted"] and abs(fresh["expires"] - (time.time() - 10 + TTL_S)) < 5
    assert b.take("fresh") == "far-host:4242"  # written 10 s ago: it holds, for a lease
    assert b.take("old") is None and "old" in b.held  # a lease after its file: taken over
    own = b.read("old")
    assert own["driver"] == "driver-b" and "squatted" not in own  # a real lease is believed
    b.release()


def test_a_squatted_claim_is_taken_over_by_a_sweep_run(ray_session, tmp_path, capsys):
    """The year-3000 claim of another host no longer blocks its config: the run trains it."""
    from icl_core.storage.claims import TTL_S
    from sweeps.depth_scaling import SWEEP

    members = SWEEP.study("least_squares").members("smoke")
    store = Store(str(tmp_path))
    squat(store, "depth_scaling", "least_squares", members[0].hash, age_s=TTL_S + 60)
    argv = ["--preset", "smoke", "--study", "least_squares", "--storage", str(tmp_path),
            "--no-figures", "--pack", "4"]
    assert SWEEP.main(argv) == 0
    out, err = capsys.readouterr()
    assert f"took over {members[0].hash} from far-host:4242 (squatted" in err
    assert "finished: 4 ok, 0 diverged, 0 failed, 0 missing" in out and "claimed" not in out
    assert store.finished("depth_scaling", "least_squares") == {m.hash for m in members}
    assert not list((tmp_path / "depth_scaling/least_squares/claims").glob("*.claim"))


def test_icl_claims_lists_and_releases_only_when_confirmed(tmp_path, capsys, monkeypatch):
    import io

    from icl.console import main as icl

    store = Store(str(tmp_path))
    squat(store, "depth_scaling", "least_squares", "a" * 16, age_s=30)
    Claims(store, "depth_scaling", "ls_mixer_depth", A).take("b" * 16)
    argv = ["claims", "depth_scaling", "--storage", str(tmp_path)]
    assert icl(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"depth_scaling: 2 claims in {tmp_path} (2 live, 0 expired or of a gone " \
        "driver)"
    squatted = next(line for line in lines if "a" * 16 in line)
    assert re.match(rf"  least_squares  {'a' * 16}  far-host:4242  age 3\ds  expires in 9m2\ds  "
                    r"\[squatted: ", squatted)  # a lease (10 min) after its file was written
    assert any(re.match(rf"  ls_mixer_depth  {'b' * 16}  host-a:11  age \ds  expires in 9m5\ds$",
                        line) for line in lines)
    assert icl([*argv, "--study", "least_squares"]) == 0
    assert "ls_mixer_depth" not in capsys.readouterr().out
    assert icl([*argv, "--study", "least_squars"]) == 2
    assert "did you mean 'least_squares'?" in capsys.readouterr().err
    assert icl([*argv, "--json"]) == 0
    listed = {c["config_hash"]: c for c in json.loads(capsys.readouterr().out)}
    assert listed["a" * 16]["host"] == "far-host" and listed["a" * 16]["live"] is True
    assert 500 < listed["b" * 16]["expires_in_s"] <= 600 and listed["b" * 16]["pid"] == 11
    assert icl([*argv, "--json", "--release"]) == 2  # lists only: nothing removed

    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))  # no terminal: never asked, no --yes
    assert icl([*argv, "--release"]) == 2
    assert "stdin is not a terminal" in capsys.readouterr().err
    assert len(list(tmp_path.glob("depth_scaling/*/claims/*.claim"))) == 2  # nothing removed
    assert icl([*argv, "--release", "--yes", "--study", "least_squares"]) == 0
    assert "removed 1 claims" in capsys.readouterr().out
    assert [p.parent.parent.name for p in tmp_path.glob("depth_scaling/*/claims/*.claim")] == \
        ["ls_mixer_depth"]
    assert icl([*argv, "--release", "--yes"]) == 0
    assert not list(tmp_path.glob("depth_scaling/*/claims/*.claim"))
