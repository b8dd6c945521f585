"""A local S3 server (moto) on 127.0.0.1, for the object-store tests and `bench store --local-s3`.

moto implements S3's conditional PUT (``If-None-Match: *`` answers 412 when the key exists),
which the tier's put-if-absent relies on. Nothing here reaches another address: the server
binds 127.0.0.1 and every client is given that endpoint and fixed test credentials (without
them obstore would ask the cloud's instance-metadata endpoint for some).

``LocalS3(thread=True)`` runs moto's ``ThreadedMotoServer`` in this process (tests);
``thread=False`` runs ``python -m moto.server`` as a child process, so a benchmark's client and
server do not share one interpreter lock.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid

ACCESS_KEY = "testing"
SECRET_KEY = "testing"
REGION = "us-east-1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def s3_store(bucket: str, prefix: str | None, endpoint: str, **kw):
    """An obstore ``S3Store`` at ``endpoint`` with the test credentials."""
    from obstore.store import S3Store

    return S3Store(bucket, prefix=prefix, endpoint=endpoint, access_key_id=ACCESS_KEY, secret_access_key=SECRET_KEY,
                   region=REGION, client_options={"allow_http": True}, **kw)


class LocalS3:
    """``with LocalS3() as s3: store = s3.store(s3.bucket())``."""

    def __init__(self, *, thread: bool = True) -> None:
        self.thread = thread
        self._server = None
        self._proc: subprocess.Popen | None = None
        self.endpoint = ""

    def __enter__(self) -> LocalS3:
        try:
            import moto.server  # noqa: F401
        except ImportError:  # pragma: no cover - moto is in the dev extra
            raise ValueError("--local-s3: needs moto (pip install 'moto[server]')") from None
        if self.thread:
            from moto.server import ThreadedMotoServer

            logging.getLogger("werkzeug").setLevel(logging.ERROR)
            self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
            self._server.start()
            host, port = self._server.get_host_and_port()
        else:
            host, port = "127.0.0.1", _free_port()
            self._proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", host, "-p", str(port)],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.endpoint = f"http://{host}:{port}"
        self._wait_ready()
        return self

    def _wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.time() + timeout
        while True:
            try:
                urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=2).close()
                return
            except (urllib.error.URLError, ConnectionError, OSError):
                if self._proc is not None and self._proc.poll() is not None:
                    raise RuntimeError(f"local S3 server exited with {self._proc.returncode}") from None
                if time.time() > deadline:
                    raise RuntimeError(f"local S3 server at {self.endpoint} did not start in {timeout:g} s") from None
                time.sleep(0.1)

    def __exit__(self, *exc) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
            self._proc = None

    def bucket(self, name: str | None = None) -> str:
        """Create a bucket (a fresh random name by default) and return its name."""
        name = name or f"tkv-{uuid.uuid4().hex[:12]}"
        req = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT", data=b"")
        urllib.request.urlopen(req, timeout=10).close()
        return name

    def store(self, bucket: str, prefix: str = "", **kw):
        """An obstore ``S3Store`` on this server."""
        return s3_store(bucket, prefix or None, self.endpoint, **kw)

    def spec(self, bucket: str, prefix: str = "") -> tuple:
        """A picklable description for worker processes (``store_suite.open_spec``)."""
        return ("s3", bucket, prefix or None, self.endpoint)

    def env(self) -> dict[str, str]:
        """Environment that makes ``s3://`` URLs (and ``tiered-kv store``) use this server."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": REGION, "AWS_ALLOW_HTTP": "true",
                "AWS_EC2_METADATA_DISABLED": "true"}
