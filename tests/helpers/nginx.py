"""The deployment's nginx, for the tests: Debian's binary running a site of ``deploy/``.

The site file (``nginx.conf`` in front of the collector, ``nginx-shuffler.conf`` in front of
the shuffler) is the one docker-compose mounts, with only its addresses changed (the
upstream servers and the listening port, all on 127.0.0.1) and the error pages' include
pointed at ``deploy/nginx-errors.conf``; it runs in the foreground from a temporary prefix and
is stopped at the end.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from chorus_collector.server.process import free_port

__all__ = ["running_nginx"]

ROOT = Path(__file__).resolve().parents[2]


def _nginx() -> str:
    found = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists()
                                      else None)
    if found is None:
        raise RuntimeError("nginx is not installed: run `make test` (it installs Debian's "
                           "nginx) or install it")
    return found


class Nginx:
    def __init__(self, upstream_port: int, site: str = "nginx.conf",
                 edits: Mapping[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.root = Path(tempfile.mkdtemp(prefix="chorus-nginx-"))
        self.root.chmod(0o777)  # workers run as nobody when the tests run as root
        text = (ROOT / "deploy" / site).read_text()
        # Every upstream server (a compose service name and its port) is the one under test.
        text, upstreams = re.subn(r"(?m)^(\s*server )[a-z][a-z0-9-]*:\d+",
                                  rf"\g<1>127.0.0.1:{upstream_port}", text)
        text, listens = re.subn(r"(?m)^(\s*listen )\d+;", rf"\g<1>127.0.0.1:{self.port};", text)
        if not upstreams or listens != 1:
            raise RuntimeError(f"deploy/{site}: no upstream server or not one listen port")
        # A test that needs a shorter timeout names the directive it shortens: it must exist.
        for old, new in (edits or {}).items():
            if old not in text:
                raise RuntimeError(f"deploy/{site} has no {old!r} to edit")
            text = text.replace(old, new)
        text = text.replace("/etc/nginx/chorus-errors.conf",
                            str(ROOT / "deploy" / "nginx-errors.conf"))
        (self.root / "site.conf").write_text(text)
        temp = {name: self.root / name for name in ("body", "proxy", "fastcgi", "uwsgi", "scgi")}
        for path in temp.values():
            path.mkdir(mode=0o777)
            path.chmod(0o777)
        (self.root / "nginx.conf").write_text(
            "daemon off;\nworker_processes 1;\n"
            f"pid {self.root}/nginx.pid;\nerror_log {self.root}/error.log warn;\n"
            "events { worker_connections 1024; }\n"
            "http {\n  access_log off;\n"
            f"  client_body_temp_path {temp['body']};\n  proxy_temp_path {temp['proxy']};\n"
            f"  fastcgi_temp_path {temp['fastcgi']};\n  uwsgi_temp_path {temp['uwsgi']};\n"
            f"  scgi_temp_path {temp['scgi']};\n  include {self.root}/site.conf;\n}}\n")
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Nginx:
        self.process = subprocess.Popen(
            [_nginx(), "-p", str(self.root), "-c", str(self.root / "nginx.conf")],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"nginx exited: {self.log()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"nginx did not listen within 20 s: {self.log()}")

    def log(self) -> str:
        path = self.root / "error.log"
        stderr = (self.process.stderr.read().decode(errors="replace")
                  if self.process is not None and self.process.stderr is not None
                  and self.process.poll() is not None else "")
        return stderr + (path.read_text(errors="replace") if path.exists() else "")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        if self.process is not None and self.process.stderr is not None:
            self.process.stderr.close()
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def running_nginx(upstream_port: int, site: str = "nginx.conf",
                  edits: Mapping[str, str] | None = None) -> Iterator[Nginx]:
    server = Nginx(upstream_port, site, edits).start()
    try:
        yield server
    finally:
        server.stop()
