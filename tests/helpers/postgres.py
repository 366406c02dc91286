"""A real PostgreSQL server for the tests: Debian's binaries, a throwaway cluster.

``initdb`` and ``pg_ctl`` run as the ``postgres`` user when the tests run as root (PostgreSQL
refuses root), into a temporary directory; the server listens on 127.0.0.1 only, on a free
port, with trust authentication for loopback, and is stopped and deleted at the end. Each
test gets its own schema, so tests stay independent without a database per test.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

from chorus_collector.server.process import free_port

__all__ = ["PostgresServer", "postgres_bin"]


def postgres_bin() -> Path:
    """The directory of Debian's PostgreSQL server binaries (the newest installed)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
                   key=lambda p: int(p.split("/")[4]))
    if not found:
        on_path = shutil.which("pg_ctl")
        if on_path is None:
            raise RuntimeError("PostgreSQL's server binaries are not installed: run `make test` "
                               "(it installs Debian's postgresql package) or install it")
        return Path(on_path).parent
    return Path(found[-1]).parent



class PostgresServer:
    def __init__(self) -> None:
        self.bin = postgres_bin()
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="chorus-pg-"))
        self.data = self.root / "data"
        self.as_postgres = os.geteuid() == 0

    def _run(self, *args: str) -> None:
        command = [str(self.bin / args[0]), *args[1:]]
        if self.as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def start(self) -> PostgresServer:
        if self.as_postgres:
            shutil.chown(self.root, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres",
                  "--no-sync", "-E", "UTF8")
        # fsync stays on: the kill -9 tests rely on what a commit promises.
        self.resume()
        return self

    def resume(self) -> None:
        """Start the server on its data directory (again, after ``halt``), on the same port."""
        options = (f"-c listen_addresses=127.0.0.1 -c port={self.port} "
                   f"-c unix_socket_directories={self.root} -c max_connections=300 "
                   "-c shared_buffers=64MB")
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l",
                  str(self.root / "server.log"), "-w", "-t", "60", "start")

    def halt(self) -> None:
        """Stop the server at once, as a crash would (``-m immediate``), keeping its data."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def stop(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def new_schema(self) -> str:
        """A URL whose connections use a new, empty schema."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {name}")
        return f"{self.url}?options=-csearch_path%3D{name}"


    def new_database(self, template: str | None = None) -> tuple[str, str]:
        """A new database, empty or a copy of ``template`` (whose connections, if any, are
        ended first: PostgreSQL copies only a database nobody is connected to): its name
        and its URL."""
        import psycopg

        name = f"d_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            if template is not None:
                conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                             "WHERE datname = %s AND pid <> pg_backend_pid()", (template,))
                conn.execute(f"CREATE DATABASE {name} TEMPLATE {template}")
            else:
                conn.execute(f"CREATE DATABASE {name}")
        return name, f"postgresql://postgres@127.0.0.1:{self.port}/{name}"

    def drop_database(self, name: str) -> None:
        """Drop a database ``new_database`` made, ending its connections first."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@contextlib.contextmanager
def running_postgres() -> Iterator[PostgresServer]:
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.stop()

