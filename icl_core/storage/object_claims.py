"""Claims (leases, icl_core.storage.claims) on S3 and S3-compatible stores, by conditional writes.

The same claim objects as on a filesystem (`<study>/claims/<config_hash>.claim`, the same JSON),
written through boto3 (pyarrow's S3 filesystem cannot send conditions):

    take       PUT If-None-Match: *        created only if no claim exists (else 412)
    take over  PUT If-Match: <ETag read>   an expired claim replaced only as it was read: of two
                                           drivers taking it over at once, one wins
    refresh    PUT If-Match: <our ETag>    fails once another driver took the claim over (lost)
    release    DELETE If-Match: <our ETag> never deletes another driver's claim

Whether the server honours the conditions is probed once per driver and bucket (a probe object
created, then written again with If-None-Match: * and with If-Match on another ETag: both must
fail with 412); a server that ignores them, a store other than S3 (gs://: its
`ifGenerationMatch=0` is not implemented here) or a missing boto3 (`pip install
"icl-sweeps[s3]"`) keeps no claims, and `unsupported` says why.

`ConditionalWrites` holds these operations; icl_core.storage.claims.ObjectClaims mixes them into its
Claims (keeping, releasing and the liveness of a claim stay there, one rule for every store).

The client is built from the storage URI as pyarrow reads it: `?endpoint_override=host:port&
scheme=http&region=...` and `s3://KEY:SECRET@bucket/...`; otherwise boto3's own chain
(AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ~/.aws, instance roles), the one pyarrow uses too.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import time
import uuid
from urllib.parse import parse_qs, unquote, urlsplit

import pyarrow.fs as pafs

from icl_core.storage.store import Store

logger = logging.getLogger(__name__)

_SUPPORTED: dict[tuple, str | None] = {}  # (endpoint, bucket) -> None or why not


@functools.lru_cache(maxsize=16)
def s3_client(uri: str):
    """A boto3 S3 client for a storage URI, with pyarrow's URI options applied (one per URI
    and process: clients are thread-safe, and slow to make)."""
    import boto3

    parts = urlsplit(uri)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    kwargs = {}
    endpoint = query.get("endpoint_override")
    if endpoint:
        scheme = query.get("scheme", "https")
        kwargs["endpoint_url"] = endpoint if "://" in endpoint else f"{scheme}://{endpoint}"
    if query.get("region"):
        kwargs["region_name"] = query["region"]
    if parts.username:
        kwargs["aws_access_key_id"] = unquote(parts.username)
        kwargs["aws_secret_access_key"] = unquote(parts.password or "")
    return boto3.client("s3", **kwargs)


def _status(exc) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def _lost(exc) -> bool:
    """A condition that did not hold: 412, 409 (a concurrent conditional write) or 404 (the
    object is gone)."""
    return _status(exc) in (404, 409, 412)


TTL_S = 600.0  # a lease's length in seconds (icl_core.storage.claims: refreshed every TTL_S / 4)


def believed(claim: dict, written: float, ttl: float) -> dict:
    """A claim with its expiry as believed (local files and objects alike): one further than
    `ttl` ahead (a squatter's "expires" in the year 3000) or not a number expires `ttl` after
    the claim was last written, and the claim carries "squatted" (or "unreadable")."""
    if math.isnan(claim["expires"]) or claim["expires"] > time.time() + ttl:
        claim["expires"] = written + ttl
        claim.setdefault("squatted", not claim.get("unreadable"))
    return claim


class ConditionalWrites:
    """take / read / refresh / release_one of icl_core.storage.claims.Claims by conditional writes to
    an S3 bucket; the class it is mixed into gives `alive(claim)`."""

    def __init__(self, store: Store, *args, client=None, **kwargs):
        super().__init__(store, *args, **kwargs)
        from botocore.exceptions import ClientError

        self.ClientError = ClientError
        self.uri, self._client = store.uri, client
        self.bucket, _, self.prefix = self.folder.partition("/")
        self.etags: dict[str, str] = {}

    @property
    def client(self):
        if self._client is None:
            self._client = s3_client(self.uri)
        return self._client

    def __getstate__(self) -> dict:  # pickled with the pool Tune keeps: without the client
        return {**self.__dict__, "_client": None}

    def key(self, h: str) -> str:
        return f"{self.prefix}/{h}.claim"

    def _body(self) -> bytes:
        return json.dumps({"host": self.owner.host, "pid": self.owner.pid,
                           "driver": self.owner.driver, "token": uuid.uuid4().hex,
                           "expires": time.time() + self.ttl}).encode()

    def _put(self, h: str, **condition) -> str:
        return self.client.put_object(Bucket=self.bucket, Key=self.key(h), Body=self._body(),
                                      ContentType="application/json", **condition)["ETag"]

    def _get(self, h: str) -> tuple[dict, str] | None:
        """(the claim, its ETag); None when there is none."""
        try:
            got = self.client.get_object(Bucket=self.bucket, Key=self.key(h))
        except self.ClientError as exc:
            if _status(exc) == 404:
                return None
            raise
        etag, data = got["ETag"], got["Body"].read()
        written = got["LastModified"].timestamp()
        try:
            claim = json.loads(data)
            claim["expires"] = float(claim["expires"])
        except (ValueError, TypeError, KeyError):  # unreadable: live until it is a TTL old
            claim = {"driver": "?", "host": "?", "pid": 0, "token": "?", "expires": math.inf,
                     "unreadable": True}
        return believed(claim, written, max(self.ttl, TTL_S)), etag

    def read(self, h: str) -> dict | None:
        got = self._get(h)
        return got and got[0]

    def take(self, h: str, _tries: int = 5) -> str | None:
        """Claim one config: None when this driver holds it now, else the live holder's
        host:pid."""
        try:
            self.etags[h] = self._put(h, IfNoneMatch="*")
            self.held.add(h)
            return None
        except self.ClientError as exc:
            if not _lost(exc) or _tries == 0:
                raise
        got = self._get(h)
        if got is None:  # released meanwhile: try again
            return self.take(h, _tries - 1)
        current, etag = got
        label = f"{current['host']}:{current['pid']}"
        mine = current["driver"] == self.owner.driver
        if not mine and self.alive(current):
            return label
        try:
            self.etags[h] = self._put(h, IfMatch=etag)  # only the claim as it was read
        except self.ClientError as exc:
            if not _lost(exc):
                raise
            return self.take(h, _tries - 1) if mine else f"{label} (taken over)"
        self.held.add(h)
        if not mine:
            why = "expired" if current["expires"] <= time.time() else "its driver is gone"
            logger.warning(f"claims: took over {h} from {label} ({why})")
        return None

    def refresh(self) -> None:
        """Extend every held claim; one another driver took over is dropped (and said)."""
        for h in sorted(self.held):
            try:
                self.etags[h] = self._put(h, IfMatch=self.etags[h])
            except self.ClientError as exc:
                if not _lost(exc):
                    raise
                self.held.discard(h)
                self.etags.pop(h, None)
                logger.warning(f"claims: lost {h} to another driver")

    def release_one(self, h: str) -> None:
        etag = self.etags.pop(h, None)
        self.held.discard(h)
        if etag is None:
            return
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self.key(h), IfMatch=etag)
        except self.ClientError as exc:
            if _lost(exc):
                return  # another driver's claim now
            if _status(exc) not in (400, 501):
                raise
            got = self._get(h)  # a server without conditional deletes
            if got and got[1] == etag:
                self.client.delete_object(Bucket=self.bucket, Key=self.key(h))


def unsupported(store: Store, claims: ConditionalWrites | None = None) -> str | None:
    """None where claims can be kept on `store` by conditional writes (S3, boto3 installed,
    and, given `claims` to probe with, a server that honours the conditions); else why not."""
    if not isinstance(store.fs, pafs.S3FileSystem):
        return (f"{store.uri.split(':', 1)[0]}:// stores keep no claims here (S3 does, by "
                "conditional writes)")
    try:
        import boto3  # noqa: F401
    except ImportError:
        return 'boto3 is not installed: pip install "icl-sweeps[s3]"'
    return None if claims is None else supports_conditional_writes(claims)


def supports_conditional_writes(claims: ConditionalWrites) -> str | None:
    """None when the server refuses a second create of one object (If-None-Match: *); else
    why not. Probed once per endpoint and bucket."""
    where = (claims.client.meta.endpoint_url, claims.bucket)
    if where not in _SUPPORTED:
        key = f"{claims.prefix}/.probe-{uuid.uuid4().hex}"
        put = claims.client.put_object
        try:
            put(Bucket=claims.bucket, Key=key, Body=b"1", IfNoneMatch="*")
            _SUPPORTED[where] = None
            for header, condition in (("If-None-Match", {"IfNoneMatch": "*"}),
                                      ("If-Match", {"IfMatch": '"0"'})):  # both must fail
                try:
                    put(Bucket=claims.bucket, Key=key, Body=b"2", **condition)
                    _SUPPORTED[where] = (f"the server at {where[0]} ignores {header} (no "
                                         "conditional writes)")
                except claims.ClientError as exc:
                    if _status(exc) != 412:
                        _SUPPORTED[where] = f"conditional writes refused ({exc})"
                if _SUPPORTED[where]:
                    break
        except claims.ClientError as exc:
            _SUPPORTED[where] = f"conditional writes refused ({exc})"
        finally:
            with contextlib.suppress(claims.ClientError):
                claims.client.delete_object(Bucket=claims.bucket, Key=key)
    return _SUPPORTED[where]
