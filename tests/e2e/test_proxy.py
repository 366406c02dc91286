"""The deployment's nginx in front of `chorus serve` (issue 13 #2, #3).

Slow clients hold nginx connections, not gunicorn threads; every error a client sees is a
problem document, the ones nginx answers itself included, while the collector's own problem
documents pass through untouched. Real nginx (Debian's), real server, on 127.0.0.1; every
loop is bounded in count and time.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from chorus_collector.problems import KINDS, PROBLEM_BASE
from chorus_collector.server.process import CollectorProcess, free_port
from helpers.nginx import Nginx, running_nginx
from helpers.support import ADMIN

pytestmark = [pytest.mark.slow, pytest.mark.sqlite_only]  # no storage here: once is enough
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[CollectorProcess, Nginx]]:
    db = tmp_path_factory.mktemp("proxy") / "chorus.db"
    # Few threads on purpose: 2 workers × 2 threads = 4 slots for 64 slow clients.
    with CollectorProcess(db, settings={"ADMIN_TOKEN": ADMIN, "WORKERS": "2",
                                        "THREADS": "2"}) as server, \
            running_nginx(server.port) as nginx:
        yield server, nginx


def _raw(port: int, request: bytes, timeout: float = 10) -> tuple[int, dict[str, str], bytes]:
    """Send raw bytes, read the whole answer (nginx closes after an error)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request)
        chunks = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
            data = b"".join(chunks)
            head, _, body = data.partition(b"\r\n\r\n")
            length = re.search(rb"(?i)content-length: *(\d+)", head)
            if length and len(body) >= int(length.group(1)):
                break
    data = b"".join(chunks)
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, v in
               (line.split(":", 1) for line in lines[1:] if ":" in line)}
    return status, headers, body


def _assert_problem(status: int, headers: dict[str, str], body: bytes, kind: str) -> None:
    assert headers["content-type"] == "application/problem+json", (status, headers, body)
    problem = json.loads(body)
    assert problem["type"] == PROBLEM_BASE + kind
    assert problem["status"] == status == KINDS[kind].status
    assert problem["title"] == KINDS[kind].title


def test_slow_clients_do_not_starve_the_collector_behind_nginx(
        proxied: tuple[CollectorProcess, Nginx]) -> None:
    """Regression (issue 13 #2): 64 connections sending their headers at 2 bytes/s made
    /healthz fail 8 of 8 times with gunicorn facing clients (16 slots). Behind nginx, with
    4 slots, it answers every time."""
    _, nginx = proxied
    stop = threading.Event()
    opened: list[socket.socket] = []

    def slow_client() -> None:
        try:
            sock = socket.create_connection(("127.0.0.1", nginx.port), timeout=5)
        except OSError:
            return
        opened.append(sock)
        request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200
        for byte in range(len(request)):  # 2 bytes a second, for at most ~8 s
            if stop.is_set() or byte > 16:
                break
            try:
                sock.sendall(request[byte:byte + 1])
            except OSError:
                return
            stop.wait(0.5)

    threads = [threading.Thread(target=slow_client) for _ in range(64)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(1.0)  # every slow connection is open and mid-headers
        answers = []
        for _ in range(8):
            try:
                answers.append(requests.get(f"{nginx.url}/healthz", timeout=5).status_code)
            except requests.RequestException as error:
                answers.append(type(error).__name__)
            time.sleep(0.2)
    finally:
        stop.set()
        for thread in threads:
            thread.join(15)
        for sock in opened:
            sock.close()
    assert len(opened) == 64
    assert answers == [200] * 8


def test_errors_nginx_answers_itself_are_problem_documents(
        proxied: tuple[CollectorProcess, Nginx]) -> None:
    """Regression (issue 13 #3): gunicorn answered these as text/html."""
    _, nginx = proxied
    cases = [
        (b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", "bad-request"),
        (b"GET /v1/caf\xc3\xa9 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
         "bad-request"),
        (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", "uri-too-long"),
        (b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 9000 + b"\r\n\r\n",
         "headers-too-large"),
        (b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
         b"Content-Length: 5000000\r\n\r\n", "body-too-large"),
    ]
    for request, kind in cases:
        _assert_problem(*_raw(nginx.port, request), kind)


def test_the_collectors_own_problems_pass_through_unchanged(
        proxied: tuple[CollectorProcess, Nginx]) -> None:
    _, nginx = proxied
    reply = requests.post(f"{nginx.url}/v1/reports", data=b"{not json",
                          headers={"Content-Type": "application/json"}, timeout=10)
    assert reply.status_code == 400
    assert reply.json()["type"] == PROBLEM_BASE + "malformed-json"  # not nginx's bad-request
    assert reply.headers["Content-Type"] == "application/problem+json"
    assert requests.get(f"{nginx.url}/healthz", timeout=10).json()["status"] == "ok"


def test_no_collector_behind_nginx_is_a_problem_document() -> None:
    with running_nginx(free_port()) as nginx:  # nothing listens upstream
        reply = requests.get(f"{nginx.url}/healthz", timeout=10)
    assert reply.headers["Content-Type"] == "application/problem+json"
    assert reply.json()["type"] == PROBLEM_BASE + "collector-unavailable"
    assert reply.status_code == 502


@pytest.mark.parametrize("site", ["nginx.conf", "nginx-replicas.conf"])
def test_both_sites_share_the_error_pages_and_limits(site: str) -> None:
    text = (ROOT / "deploy" / site).read_text()
    assert "include /etc/nginx/chorus-errors.conf;" in text
    assert "client_header_timeout 10s;" in text and "client_max_body_size 4m;" in text
    assert "proxy_request_buffering on;" in text


def test_the_proxys_problem_documents_are_in_the_catalogue() -> None:
    text = (ROOT / "deploy" / "nginx-errors.conf").read_text()
    documents = [json.loads(body) for body in re.findall(r"return \d+ '(\{.*?\})';", text)]
    assert len(documents) == 6
    for problem in documents:
        kind = problem["type"].removeprefix(PROBLEM_BASE)
        assert (KINDS[kind].status, KINDS[kind].title) == (problem["status"], problem["title"])
