"""One driver per config: claims in the store, for real (files, processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import tiny_member

from icl_core.claims import Claims, Owner, holder, plan_claims, skipped_line
from icl_core.config import resolve_member
from icl_core.store import Store
from icl_core.trial import TrialSpec, run_trial

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


DRIVER = """
import json, sys, time
from conftest import tiny_member
from icl_core.claims import plan_claims
from icl_core.config import resolve_member
from icl_core.store import Store
from icl_core.trial import TrialSpec, run_trial

storage, start = sys.argv[1], float(sys.argv[2])
members = [resolve_member(tiny_member(seed=s)) for s in range(6)]
store = Store(storage)
while time.time() < start:
    time.sleep(0.005)
claims, mine, others = plan_claims(store, "sw", "st", [m.hash for m in members])
trained = []
with claims.keep():
    for m in members:
        if m.hash in mine:
            spec = TrialSpec("sw", "st", storage, [m.to_dict()], driver=claims.owner.driver)
            trained += [h for h, s in run_trial(spec).items() if s == "ok"]
print(json.dumps({"trained": trained, "others": others}))
"""


def test_two_drivers_started_at_once_train_each_config_exactly_once(tmp_path):
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"}
    start = time.time() + 8  # both have imported torch by then
    procs = [subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path), str(start)],
                              stdout=subprocess.PIPE, env=env, cwd=ROOT) for _ in range(2)]
    outs = [json.loads(p.communicate(timeout=240)[0].decode().splitlines()[-1]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
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
    its process is gone and trains those configs (`README`: a re-run resumes a killed driver)."""
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
