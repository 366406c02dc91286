"""``chorus demo`` as a new user runs it: it ends by itself with the dashboard's address and
the tokens to sign in with, keeping its database; ``--serve`` keeps the collector on loopback
until Ctrl-C, then stops it cleanly and exits 0; a second run serves the kept database
without simulating it again.

One simulated demo of 300 users (``kept``, once per module) is what the first run's test reads
and what the others start from, each on its own copy of the folder; a new population (200
users) is simulated afresh under ``--serve``, so both paths, simulate-then-serve and
serve-the-kept-database, still run.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from chorus_collector.cli import main as cli
from chorus_collector.cli.demo import run_demo

# The demo picks its own storage (a SQLite file in the folder --dir names).
pytestmark = [pytest.mark.slow, pytest.mark.sqlite_only]
CHORUS = Path(sys.executable).with_name("chorus")
DASHBOARD = re.compile(r"^dashboard: (http://127\.0\.0\.1:(\d+)/) \((.*)\)$")
TOKEN = re.compile(r"^  (?:sign in with|or) the (analyst|admin) token (\S+)")
REUSED = re.compile(r"^using the database kept from .*: 300 installs, 3,000 reports")
SIMULATING = re.compile(r"^simulating ")
WAIT = 120  # seconds: a bound on each step, never a measured speed


@contextmanager
def running(folder: Path, *args: str
            ) -> Iterator[tuple[subprocess.Popen[str], queue.Queue[str]]]:
    """``chorus demo --dir FOLDER ARGS`` with its output lines arriving in a queue; killed if
    still running at the end."""
    # PYTHONFAULTHANDLER: a demo that does not exit is sent SIGABRT and prints where each of
    # its threads stands (``_exit_status``), so that a hang says why.
    process = subprocess.Popen([str(CHORUS), "demo", "--dir", str(folder), *args],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "PYTHONFAULTHANDLER": "1"})
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line.rstrip("\n"))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield process, lines
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        reader.join(10)
        assert process.stdout is not None
        process.stdout.close()


def _exit_status(process: subprocess.Popen[str], lines: queue.Queue[str]) -> int:
    """The demo's exit status, once it exits; if it does not within WAIT, its threads'
    stacks and everything it printed since the last line read, as the failure."""
    try:
        return process.wait(WAIT)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGABRT)
        process.wait(10)
        printed = []
        while True:
            try:
                printed.append(lines.get(timeout=2))
            except queue.Empty:
                break
        raise AssertionError(f"the demo did not exit within {WAIT} s; it printed:\n"
                             + "\n".join(printed)) from None


def _until(lines: queue.Queue[str], pattern: re.Pattern[str]) -> tuple[re.Match[str], list[str]]:
    seen: list[str] = []
    while True:
        try:
            line = lines.get(timeout=WAIT)
        except queue.Empty:
            raise AssertionError(f"no line matching {pattern.pattern} in:\n"
                                 + "\n".join(seen)) from None
        seen.append(line)
        match = pattern.match(line)
        if match:
            return match, seen


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read()


def _tokens(lines: queue.Queue[str]) -> dict[str, str]:
    found = {}
    for _ in range(2):
        match, _seen = _until(lines, TOKEN)
        found[match[1]] = match[2]
    return found


def _estimates(url: str, token: str) -> dict[str, Any]:
    request = urllib.request.Request(url + "v1/campaigns/browser/estimates",
                                     headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        assert reply.status == 200
        answer: dict[str, Any] = json.load(reply)
        return answer


@dataclass(frozen=True)
class Kept:
    """A finished ``chorus demo --users 300``: its folder, what it printed up to the
    dashboard's address, its tokens and its exit status."""

    folder: Path
    seen: list[str]
    dashboard: re.Match[str]
    tokens: dict[str, str]
    returncode: int

    def copy(self, folder: Path) -> Path:
        """The kept demo's folder copied to ``folder`` (a test's own, to run demos in)."""
        shutil.copytree(self.folder, folder, dirs_exist_ok=True)
        return folder


@pytest.fixture(scope="module")
def kept(tmp_path_factory: pytest.TempPathFactory) -> Kept:
    folder = tmp_path_factory.mktemp("demo")
    with running(folder, "--users", "300") as (process, lines):
        match, seen = _until(lines, DASHBOARD)
        tokens = _tokens(lines)
        returncode = _exit_status(process, lines)
    return Kept(folder, seen, match, tokens, returncode)


def test_serve_keeps_the_collector_answering_until_ctrl_c_then_exits_cleanly(
        kept: Kept, tmp_path: Path) -> None:
    with running(kept.copy(tmp_path), "--serve", "--users", "300") as (process, lines):
        match, _ = _until(lines, DASHBOARD)
        url, port, note = match[1], int(match[2]), match[3]
        assert "until Ctrl-C" in note
        tokens = _tokens(lines)
        assert set(tokens) == {"analyst", "admin"} and tokens["analyst"] != tokens["admin"]
        # The demo's data is there, for the analyst token it printed.
        assert _get(url + "healthz")[0] == 200
        assert _estimates(url, tokens["analyst"])["n"] == 300
        assert process.poll() is None, "it keeps serving"
        process.send_signal(signal.SIGINT)
        assert _exit_status(process, lines) == 0
        _until(lines, re.compile(r"^stopping the collector$"))
    # The server went with it: nothing listens on its port any more.
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()


def test_ctrl_c_as_soon_as_the_address_is_shown_is_a_clean_stop(
        kept: Kept, tmp_path: Path) -> None:
    """A reader may press Ctrl-C on the very line that shows the address, before the demo
    reaches its serving loop: that is a stop like any other (CI once saw exit 1 there)."""
    folder = kept.copy(tmp_path)
    leaked: list[int] = []
    printed: list[str] = []

    def echo(line: str) -> None:
        printed.append(line)
        if line.startswith("dashboard: "):
            os.kill(os.getpid(), signal.SIGINT)  # handled before the next line is printed

    # A SIGINT that escapes the demo lands here instead of interrupting pytest; the timer
    # then stops a demo that missed it, so that the test fails rather than hangs.
    previous = signal.signal(signal.SIGINT, lambda signum, frame: leaked.append(signum))
    rescue = threading.Timer(WAIT, os.kill, (os.getpid(), signal.SIGINT))
    rescue.start()
    try:
        result = run_demo(users=300, folder=folder, serve=True, echo=echo)
    finally:
        rescue.cancel()
        signal.signal(signal.SIGINT, previous)
    assert not leaked, "the SIGINT reached the caller's handler, not the demo's"
    assert result["reused"] and printed[-1] == "stopping the collector"
    assert signal.getsignal(signal.SIGINT) is previous


def test_without_serve_it_ends_by_itself_printing_the_address_and_how_to_keep_it(
        kept: Kept) -> None:
    note, seen = kept.dashboard[3], kept.seen
    assert "chorus demo --serve" in note and "make serve-demo" in note
    assert "without simulating it again" in note
    assert any(SIMULATING.match(line) for line in seen)
    # Progress while it simulates: the phases, with counts, as they end.
    assert "  installs: 1,200 reports accepted" in "\n".join(seen)
    assert "3,000 reports accepted" in "\n".join(seen)
    assert set(kept.tokens) == {"analyst", "admin"}
    assert kept.returncode == 0
    assert (kept.folder / "demo.db").exists() and (kept.folder / "demo.json").exists()


def test_a_second_run_and_serve_use_the_kept_database_without_simulating(
        kept: Kept, tmp_path: Path) -> None:
    first = kept.tokens
    folder = kept.copy(tmp_path)
    simulated = (folder / "demo.db").stat().st_ino
    # `make demo` again: the same estimates' inputs, printed again, nothing simulated.
    with running(folder, "--users", "300") as (process, lines):
        _, seen = _until(lines, DASHBOARD)
        assert any(REUSED.match(line) for line in seen), "\n".join(seen)
        assert not any(SIMULATING.match(line) for line in seen)
        assert _tokens(lines) == first
        assert _exit_status(process, lines) == 0
    # `make serve-demo`: the kept database, served at once with the tokens printed before.
    with running(folder, "--serve", "--users", "300") as (process, lines):
        match, seen = _until(lines, DASHBOARD)
        assert not any(SIMULATING.match(line) for line in seen)
        assert _tokens(lines) == first
        answer = _estimates(match[1], first["analyst"])
        assert answer["n"] == 300
        process.send_signal(signal.SIGINT)
        assert _exit_status(process, lines) == 0
    assert (folder / "demo.db").stat().st_ino == simulated
    # Another population is another demo: simulated afresh, with new tokens, and served
    # (a fresh simulation under --serve: simulated, then answering until Ctrl-C).
    with running(folder, "--serve", "--users", "200") as (process, lines):
        match, seen = _until(lines, DASHBOARD)
        assert any(SIMULATING.match(line) for line in seen)
        tokens = _tokens(lines)
        assert tokens != first
        assert _estimates(match[1], tokens["analyst"])["n"] == 200
        assert process.poll() is None, "it keeps serving"
        process.send_signal(signal.SIGINT)
        assert _exit_status(process, lines) == 0


def test_a_port_in_use_is_a_one_line_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(cli, ["demo", "--users", "100", "--port", str(port),
                                          "--dir", str(tmp_path)])
    assert result.exit_code == 1
    assert result.output == (f"Error: port {port} on 127.0.0.1 is in use: choose another, or "
                             "leave --port out for a free one\n")


def test_too_few_users_for_an_estimate_is_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["demo", "--users", "10", "--dir", str(tmp_path)])
    assert result.exit_code == 2
    assert "--users" in result.output
