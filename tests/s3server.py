"""A real S3 API for the tests: moto's standalone server (`pip install "moto[server]"`) as a
subprocess on a free local port, one bucket per test. Sweeps reach it through pyarrow's S3
filesystem with the endpoint and credentials in the storage URI (workers of an already started
Ray need no environment), boto3 through `client()`."""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from dataclasses import dataclass

KEY, SECRET = "testing", "testing-secret"  # moto accepts any credentials
REGION = "us-east-1"


@dataclass
class S3Server:
    port: int
    proc: subprocess.Popen

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict:
        """The environment a process reaches this server with (storage given as a plain
        s3://bucket/prefix URI)."""
        return {"AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET,
                "AWS_REGION": REGION, "AWS_ENDPOINT_URL": self.endpoint}

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION,
                            aws_access_key_id=KEY, aws_secret_access_key=SECRET)

    def bucket(self) -> str:
        name = f"icl-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def uri(self, bucket: str, prefix: str = "results") -> str:
        """A storage URI carrying the endpoint and the credentials (pyarrow's URI options)."""
        return (f"s3://{KEY}:{SECRET}@{bucket}/{prefix}?endpoint_override=127.0.0.1:{self.port}"
                f"&scheme=http&region={REGION}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(timeout: float = 30.0) -> S3Server:
    """moto's server on a free port, answering; RuntimeError saying why when it cannot start."""
    try:
        import moto.server  # noqa: F401
    except ImportError as exc:
        raise RuntimeError(f"moto[server] is not installed ({exc})") from None
    port = free_port()
    log = tempfile.TemporaryFile()  # moto logs every request: a pipe nobody reads would fill
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                             str(port)], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"moto server exited: {log.read().decode()[-500:]}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/", timeout=1)
            return S3Server(port, proc)
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"moto server did not answer on port {port} within {timeout:.0f} s")
