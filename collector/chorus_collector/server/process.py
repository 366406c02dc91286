"""Run a collector as a child process on loopback (for the demo, tests and benchmarks).

It runs the same command as the container image, ``chorus serve``, with settings passed
through ``CHORUS_*`` environment variables.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

__all__ = ["SERVE_COMMAND", "CollectorProcess", "free_port"]

SERVE_COMMAND = ("chorus", "serve")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class CollectorProcess:
    """``with CollectorProcess(db) as server: server.url`` – started, healthy, then stopped."""

    def __init__(self, database: str | Path, *, settings: Mapping[str, str] | None = None,
                 port: int | None = None, startup_timeout: float = 30.0,
                 log_path: Path | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("CHORUS_")}
        env.update({"CHORUS_BIND": f"127.0.0.1:{self.port}", "CHORUS_DATABASE": str(database)})
        env.update({f"CHORUS_{k}": v for k, v in (settings or {}).items()})
        self.env = env
        self.startup_timeout = startup_timeout
        if log_path is None:
            if "://" in str(database):  # a database URL: the log goes beside nothing
                handle, name = tempfile.mkstemp(prefix="chorus-collector-", suffix=".log")
                os.close(handle)
                log_path = Path(name)
            else:
                log_path = Path(database).with_suffix(".log")
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        # The console script of this interpreter's environment, i.e. exactly `chorus serve`.
        script = Path(sys.executable).with_name(SERVE_COMMAND[0])
        return [str(script), *SERVE_COMMAND[1:]]

    def start(self) -> CollectorProcess:
        with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
            # A session of its own, so kill() can take down the workers with the master.
            self.process = subprocess.Popen(self.command(), env=self.env,
                                            stdout=subprocess.DEVNULL, stderr=log,
                                            start_new_session=True)
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"collector exited with {self.process.returncode}:\n"
                                   f"{self.log()}")
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=1) as reply:
                    if reply.status == 200:
                        return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"collector did not become healthy within {self.startup_timeout} s")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL the master and every worker at once: a crash, not a shutdown."""
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def log(self) -> str:
        """What the server wrote to stderr so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def __enter__(self) -> CollectorProcess:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
