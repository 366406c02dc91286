"""``chorus demo`` as a new user runs it: it ends by itself with the dashboard's address and
the tokens to sign in with; ``--serve`` keeps the collector on loopback until Ctrl-C, then
stops it cleanly and exits 0."""

from __future__ import annotations

import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner

from chorus_collector.cli import main as cli

# The demo picks its own storage (a SQLite file in a temporary folder).
pytestmark = [pytest.mark.slow, pytest.mark.sqlite_only]
CHORUS = Path(sys.executable).with_name("chorus")
DASHBOARD = re.compile(r"^dashboard: (http://127\.0\.0\.1:(\d+)/) \((.*)\)$")
TOKEN = re.compile(r"^  (?:sign in with|or) the (analyst|admin) token (\S+)")
WAIT = 120  # seconds: a bound on each step, never a measured speed


@contextmanager
def running(*args: str) -> Iterator[tuple[subprocess.Popen[str], queue.Queue[str]]]:
    """``chorus demo ARGS`` with its output lines arriving in a queue; killed if still
    running at the end."""
    process = subprocess.Popen([str(CHORUS), "demo", *args], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
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


def test_serve_keeps_the_collector_answering_until_ctrl_c_then_exits_cleanly() -> None:
    with running("--serve", "--users", "300") as (process, lines):
        match, _ = _until(lines, DASHBOARD)
        url, port, note = match[1], int(match[2]), match[3]
        assert "until Ctrl-C" in note
        tokens = _tokens(lines)
        assert set(tokens) == {"analyst", "admin"} and tokens["analyst"] != tokens["admin"]
        # The demo's data is there, for the analyst token it printed.
        assert _get(url + "healthz")[0] == 200
        request = urllib.request.Request(url + "v1/campaigns/browser/estimates",
                                         headers={"Authorization":
                                                  f"Bearer {tokens['analyst']}"})
        with urllib.request.urlopen(request, timeout=30) as reply:
            assert reply.status == 200
        assert process.poll() is None, "it keeps serving"
        process.send_signal(signal.SIGINT)
        assert process.wait(WAIT) == 0
        _until(lines, re.compile(r"^stopping the collector$"))
    # The server went with it: nothing listens on its port any more.
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()


def test_without_serve_it_ends_by_itself_printing_the_address_and_how_to_keep_it() -> None:
    with running("--users", "300") as (process, lines):
        match, _ = _until(lines, DASHBOARD)
        assert "chorus demo --serve" in match[3] and "make serve-demo" in match[3]
        assert set(_tokens(lines)) == {"analyst", "admin"}
        assert process.wait(WAIT) == 0


def test_a_port_in_use_is_a_one_line_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(cli, ["demo", "--users", "100", "--port", str(port)])
    assert result.exit_code == 1
    assert result.output == (f"Error: port {port} on 127.0.0.1 is in use: choose another, or "
                             "leave --port out for a free one\n")


def test_too_few_users_for_an_estimate_is_refused() -> None:
    result = CliRunner().invoke(cli, ["demo", "--users", "10"])
    assert result.exit_code == 2
    assert "--users" in result.output
