"""One driver per config: a claim (a lease) per config in the store; one driver per search: a
lease on its journal (`lease`, key `optuna.journal`, icl_core.running.search).

    <storage>/<sweep>/<study>/claims/<config_hash>.claim   {"host", "pid", "driver", "token",
                                                            "expires"} (JSON)

A driver claims the configs it is about to train (`plan_claims`: not finished, claimed, then
checked again for rows another driver wrote meanwhile) and keeps its claims alive while its
trials run (`Claims.keep`: refreshed every `TTL_S / 4`, released once the config's row file is
written, or at the end). Another driver
skips configs with a live claim and says so; a claim past its expiry (a dead driver) is taken
over. An expiry further than a lease length (`TTL_S`) ahead is not believed (a squatter, or
a driver with a wild clock): such a claim expires a lease length after its file was last
written (its mtime). A trial checks again just before a member trains (`holder`): a member
claimed by another live driver is skipped, not trained. `icl claims <sweep>` lists the claims
and `--release` removes them (a dead driver's on another host: only expiry frees those).

Atomicity, local and shared POSIX filesystems (NFS included): a claim is created with its
content by link(2) of a written temporary file (fails if the claim exists: no reader ever sees
an empty claim); an expired claim is taken over by whoever creates the `<hash>.takeover-<token>`
marker of that claim's generation first (O_EXCL), so two drivers never both take it. Leases
assume the drivers' clocks agree to well within `TTL_S / 4` and that no driver stalls for a
whole `TTL_S`.

Object stores: on S3 (and S3-compatible servers that honour conditional writes) the same
claims are kept by conditional PUTs (If-None-Match: *, If-Match: <ETag>; icl_core.storage.object_claims).
Elsewhere (gs://, a server that ignores the conditions, no boto3) claims are skipped with a
warning, and two drivers started on the same study may train a config twice (each row file is
still written whole, so nothing is corrupted: the later one wins).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from functools import partial

import pyarrow.fs as pafs

from icl_core.common.progress import span
from icl_core.storage.object_claims import TTL_S, ConditionalWrites, believed, unsupported
from icl_core.storage.store import Store

logger = logging.getLogger(__name__)

_DRIVER = uuid.uuid4().hex[:12]  # this process's driver id


@dataclass(frozen=True)
class Owner:
    host: str
    pid: int
    driver: str

    @classmethod
    def this(cls) -> Owner:
        return cls(socket.gethostname(), os.getpid(), _DRIVER)

    @property
    def label(self) -> str:
        return f"{self.host}:{self.pid}"


class Claims:
    """One driver's claims on one study's configs."""

    def __init__(self, store: Store, sweep: str, study: str, owner: Owner | None = None,
                 ttl: float = TTL_S):
        self.owner, self.ttl = owner or Owner.this(), ttl
        self.local = isinstance(store.fs, pafs.LocalFileSystem)
        self.folder = f"{store.study_dir(sweep, study)}/claims"
        self.row_files = partial(store.member_files, sweep, study)  # {hash: path} of rows/
        self.held: set[str] = set()

    def path(self, h: str) -> str:
        return f"{self.folder}/{h}.claim"

    def read(self, h: str) -> dict | None:
        """The claim on config `h` (None when there is none), its expiry as believed: one
        further than a lease length ahead (a squatter's "expires" in the year 3000) is not
        believed: the claim then expires a lease length after its file was last written (its
        mtime) and carries "squatted": True. An unreadable claim counts the same way."""
        try:
            with open(self.path(h)) as f:
                claim = json.load(f)
            if not isinstance(claim, dict) or not {"host", "pid", "driver", "token",
                                                   "expires"} <= claim.keys():
                raise ValueError("not a claim")
            claim["expires"] = float(claim["expires"])
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError):  # unreadable: live until its file is a TTL old
            claim = {"driver": "?", "host": "?", "pid": 0, "token": "?", "expires": math.inf,
                     "unreadable": True}
        try:
            written = os.stat(self.path(h)).st_mtime
        except FileNotFoundError:
            return None
        return believed(claim, written, max(self.ttl, TTL_S))

    def _written(self) -> str:
        """A temporary file holding a fresh claim of this owner."""
        os.makedirs(self.folder, exist_ok=True)
        tmp = f"{self.folder}/.{uuid.uuid4().hex}.tmp"
        record = {"host": self.owner.host, "pid": self.owner.pid, "driver": self.owner.driver,
                  "token": uuid.uuid4().hex, "expires": time.time() + self.ttl}
        with open(tmp, "w") as f:
            json.dump(record, f)
        return tmp

    def take(self, h: str) -> str | None:
        """Claim one config: None when this driver holds it now, else the live holder's
        host:pid."""
        tmp = self._written()
        try:
            try:
                os.link(tmp, self.path(h))  # create with content, or fail if it exists
                self.held.add(h)
                return None
            except FileExistsError:
                pass
            current = self.read(h)
            if current is None:  # released meanwhile: try once more
                return self.take(h)
            if current["driver"] == self.owner.driver:
                os.replace(tmp, self.path(h))
                self.held.add(h)
                return None
            if live(current):
                return f"{current['host']}:{current['pid']}"
            return self._take_over(h, current, tmp)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.remove(tmp)

    def _take_over(self, h: str, expired: dict, tmp: str) -> str | None:
        """The expired claim `expired` replaced by ours, by whoever marks its generation first."""
        marker = f"{self.path(h)}.takeover-{expired['token']}"
        with contextlib.suppress(FileNotFoundError):  # a taker that died mid-takeover
            if time.time() - os.path.getmtime(marker) > self.ttl:
                os.remove(marker)
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            return f"{expired['host']}:{expired['pid']} (being taken over)"
        try:
            if (self.read(h) or {}).get("token") != expired["token"]:
                return f"{expired['host']}:{expired['pid']} (taken over)"
            os.replace(tmp, self.path(h))
            self.held.add(h)
            why = "expired"
            if expired["expires"] > time.time():
                why = "its driver is gone"
            elif expired.get("squatted"):
                why = "squatted: its expiry was further than a lease ahead; expired by its age"
            logger.warning(f"claims: took over {h} from {expired['host']}:{expired['pid']} "
                           f"({why})")
            return None
        finally:
            os.remove(marker)

    def finished_here(self) -> set[str]:
        """Configs with a row file in the study's rows/ folder (one listing): their trials
        wrote them, so their claims need no refresh (failed/ members are not among them: a
        restarted trial trains those again)."""
        return set(self.row_files())

    def refresh(self) -> None:
        """Extend every held claim of a config not finished yet (a finished one's claim is
        released: rewriting thousands of them was a seventh of a big sweep's driver time);
        one another driver took over is dropped (and said)."""
        done = self.finished_here() & self.held
        for h in sorted(done):
            self.release_one(h)
        for h in sorted(self.held):
            current = self.read(h)
            if current is None or current["driver"] != self.owner.driver:
                self.held.discard(h)
                logger.warning(f"claims: lost {h} to another driver")
                continue
            os.replace(self._written(), self.path(h))

    def release_one(self, h: str) -> None:
        if (self.read(h) or {}).get("driver") == self.owner.driver:
            with contextlib.suppress(FileNotFoundError):
                os.remove(self.path(h))
        self.held.discard(h)

    def release(self) -> None:
        for h in sorted(self.held):
            self.release_one(h)

    @contextlib.contextmanager
    def keep(self):
        """Refresh the held claims every ttl / 4 while the block runs; release them after."""
        stop = threading.Event()

        def refresher():
            while not stop.wait(self.ttl / 4):
                self.refresh()

        thread = threading.Thread(target=refresher, name="claims", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join()
            self.release()


class ObjectClaims(ConditionalWrites, Claims):
    """Claims on S3 by conditional writes (icl_core.storage.object_claims), live by the same rule."""

    def alive(self, claim: dict) -> bool:
        return live(claim)


def study_claims(store: Store, sweep: str, study: str,
                 owner: Owner | None = None) -> tuple[Claims, str | None]:
    """(the claims of `study` on `store`, None): files on a filesystem, objects on S3 where its
    server honours conditional writes (icl_core.storage.object_claims); where the store keeps
    none, (claims that hold nothing, why not)."""
    claims = Claims(store, sweep, study, owner)
    if claims.local:
        return claims, None
    why = unsupported(store)
    object_claims = None if why else ObjectClaims(store, sweep, study, owner)
    why = why or unsupported(store, object_claims)
    return (claims, why) if why else (object_claims, None)


def plan_claims(store: Store, sweep: str, study: str, hashes: list[str],
                owner: Owner | None = None) -> tuple[Claims, list[str], dict[str, str]]:
    """(claims, the hashes this driver trains, {hash: host:pid} of those another live driver
    holds) among `hashes` not finished: claimed, then checked again for rows another driver
    finished between the first check and the claim."""
    finished = store.finished(sweep, study, hashes)  # once: it reads every row file
    todo = [h for h in hashes if h not in finished]
    claims, why = study_claims(store, sweep, study, owner)
    if why:
        logger.warning(f"claims: not on {store.redacted} ({why}): two drivers of {sweep}/{study} may "
                       "train a config twice")
        return claims, todo, {}
    others = {}
    for h in todo:
        holder = claims.take(h)
        if holder is not None:
            others[h] = holder
    mine = [h for h in todo if h in claims.held]
    done = store.finished(sweep, study, mine)
    for h in done:  # another driver finished it between the check and the claim
        claims.release_one(h)
    return claims, [h for h in mine if h not in done], others


def holder(store: Store, sweep: str, study: str, h: str, driver: str) -> str | None:
    """host:pid of another driver's live claim on config `h`; None when there is none, it is
    `driver`'s own, it expired, or the store holds no claims (an object store without them)."""
    claims = Claims(store, sweep, study)
    if not claims.local:
        if unsupported(store):
            return None
        claims = ObjectClaims(store, sweep, study)
    current = claims.read(h)
    if current is None or current["driver"] == driver or not live(current):
        return None
    return f"{current['host']}:{current['pid']}"


def live(claim: dict) -> bool:
    """A claim holds while it has not expired and, on this host, while its driver process
    runs: a killed driver's claims are taken over at once by the next run on the same host
    (another host's dead driver is known only by expiry)."""
    if claim["expires"] <= time.time():
        return False
    if claim["host"] != socket.gethostname():
        return True
    try:
        os.kill(int(claim["pid"]), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a process of another user: running
        return True
    return True


def skipped_line(others: dict[str, str]) -> str:
    """'3 configs claimed by another driver (host:pid), skipped'."""
    holders = ", ".join(sorted(set(others.values())))
    n = len(others)
    return f"{n} config{'s' if n != 1 else ''} claimed by another driver ({holders}), skipped"


class Held(Exception):
    """A lease (`lease`) another live driver holds: its holder, its expiry (None when it changed
    hands as it was read) and where its claim is."""

    def __init__(self, holder: str, expires: float | None, path: str):
        super().__init__(f"held by {holder}")
        self.holder, self.expires, self.path = holder, expires, path

    def expiry(self) -> str:
        """'expires at 14:05:12, in 9m58s, unless that driver refreshes it'."""
        if self.expires is None:
            return "changed hands as it was read"
        at = time.strftime("%H:%M:%S", time.localtime(self.expires))
        return (f"expires at {at}, in {span(self.expires - time.time())}, unless that driver "
                "refreshes it")


@contextlib.contextmanager
def lease(store: Store, sweep: str, study: str, key: str, owner: Owner | None = None):
    """One driver at a time on `key` of a study (a search: its journal): the claim
    `<study>/claims/<key>.claim` taken, refreshed while the block runs and released after it
    (an error and Ctrl-C included); a driver that dies leaves it to expire (on its own host, to
    be taken over at once). Raises Held, before the block runs, where another live driver holds
    it; where the store keeps no claims (gs://, ...) says so on one line and yields None."""
    claims, why = study_claims(store, sweep, study, owner)
    if why:
        logger.warning(f"claims: not on {store.redacted} ({why}): two drivers of {sweep}/{study} may "
                       "run it at once")
        yield None
        return
    holder = claims.take(key)
    if holder is not None:
        current = claims.read(key)
        raise Held(holder, current and current["expires"], claims.path(key))
    with claims.keep():
        yield claims


# ------------------------------------------------------------ `icl claims`: list and release


@dataclass(frozen=True)
class Listed:
    """One claim file as `icl claims` shows it."""

    study: str
    config_hash: str
    claim: dict  # as `Claims.read` believes it
    path: str
    age_s: float  # since its file was last written (created or refreshed)

    @property
    def live(self) -> bool:
        return live(self.claim)

    def line(self, now: float) -> str:
        c = self.claim
        left = c["expires"] - now
        when = f"expires in {span(left)}" if left > 0 else f"expired {span(-left)} ago"
        notes = []
        if c.get("unreadable"):
            notes.append("unreadable: it expires a lease after its file was written")
        if c.get("squatted"):
            notes.append("squatted: its expiry was further than a lease ahead, so it expires "
                         "a lease after its file was written")
        if left > 0 and not self.live:
            notes.append("its driver is gone (this host)")
        elif not self.live:
            notes.append("the next run takes it over")
        return (f"  {self.study}  {self.config_hash}  {c['host']}:{c['pid']}  age "
                f"{span(self.age_s)}  {when}" + "".join(f"  [{n}]" for n in notes))


def listed(store: Store, sweep: str, studies: list[str]) -> list[Listed]:
    """Every claim file of `studies` of `sweep` (local stores only: others hold no claims)."""
    out, now = [], time.time()
    for study in studies:
        claims = Claims(store, sweep, study)
        try:
            names = sorted(os.listdir(claims.folder))
        except FileNotFoundError:
            continue
        for name in names:
            if not name.endswith(".claim"):
                continue
            h = name[:-len(".claim")]
            claim = claims.read(h)
            try:
                age = now - os.stat(claims.path(h)).st_mtime
            except FileNotFoundError:  # released meanwhile
                continue
            if claim is not None:
                out.append(Listed(study, h, claim, claims.path(h), age))
    return out


def remove(claims: list[Listed]) -> int:
    """Remove the listed claim files (and any takeover markers of them); how many went."""
    gone = 0
    for c in claims:
        folder = os.path.dirname(c.path)
        for name in os.listdir(folder):
            if name.startswith(f"{c.config_hash}.claim.takeover-"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(f"{folder}/{name}")
        with contextlib.suppress(FileNotFoundError):
            os.remove(c.path)
            gone += 1
    return gone
