"""Start and stop a real `inferd serve` for the server tests.

The binary is $INFERD_BIN or <repo>/build/inferd; the model defaults to
../shared/models/shakespeare-target.gguf. The server binds 127.0.0.1 on a free port,
logs to a file (read it with .log()), and is ready when /health/ready says 200.
"""
from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("INFERD_SHARED_MODELS", REPO_ROOT.parent / "shared" / "models")).parent
MODEL = SHARED / "models" / "shakespeare-target.gguf"
TEMPLATES = SHARED / "templates"


def inferd_bin() -> Path:
    env = os.environ.get("INFERD_BIN")
    return Path(env) if env else REPO_ROOT / "build" / "inferd"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, *args: str, model: Path | str | None = MODEL, env: dict | None = None,
                 ready_timeout: float = 60.0, host: str = "127.0.0.1", prefix: list[str] | None = None):
        """model=None: no -m (e.g. with --random-weights). prefix: run it under a command
        that execs it (e.g. ["ip", "netns", "exec", NS]), bound to host."""
        self.port = free_port()
        self.host = host
        self.logf = tempfile.NamedTemporaryFile(prefix="inferd-serve-", suffix=".log", delete=False)
        cmd = [*(prefix or []), str(inferd_bin()), "serve", *(["-m", str(model)] if model is not None else []),
               "--host", self.host, "--port", str(self.port), *args]
        e = dict(os.environ)
        e.update(env or {})
        self.proc = subprocess.Popen(cmd, stdout=self.logf, stderr=subprocess.STDOUT, env=e)
        deadline = time.time() + ready_timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"inferd serve exited with {self.proc.returncode}:\n{self.log()}")
            try:
                st, _, _ = self.request("GET", "/health/ready", timeout=2)
                if st == 200:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                self.kill()
                raise RuntimeError(f"inferd serve not ready after {ready_timeout} s:\n{self.log()}")
            time.sleep(0.05)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def log(self) -> str:
        return Path(self.logf.name).read_text(errors="replace")

    def log_lines(self) -> list[dict]:
        out = []
        for line in self.log().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out

    def connection(self, timeout: float = 60) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(self, method: str, path: str, body=None, headers: dict | None = None,
                timeout: float = 60):
        """-> (status, headers dict (lower-case names), body bytes)."""
        h = dict(headers or {})
        if body is not None and not isinstance(body, (bytes, bytearray)):
            body = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        c = self.connection(timeout)
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            data = r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, data
        finally:
            c.close()

    def json(self, method: str, path: str, body=None, headers=None):
        st, h, data = self.request(method, path, body, headers)
        return st, json.loads(data) if data else None

    def metrics(self, headers=None) -> dict:
        """Samples of /metrics: {'name{labels}': value}."""
        st, _, data = self.request("GET", "/metrics", headers=headers)
        assert st == 200, data
        out = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out

    def signal(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 60) -> int:
        return self.proc.wait(timeout)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self.logf.close()
        if self.proc.returncode == 0:  # keep the log of a server that failed
            Path(self.logf.name).unlink(missing_ok=True)
        return self.proc.returncode


def sse_events(resp) -> list:
    """Read an SSE response (http.client) to the end: list of data payloads (str)."""
    out = []
    buf = b""
    while True:
        chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            for line in ev.split(b"\n"):
                if line.startswith(b"data: "):
                    out.append(line[6:].decode())
    return out
