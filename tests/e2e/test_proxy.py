"""The deployment's nginx in front of `chorus serve` and `chorus shuffler` (issue 13 #2, #3;
issue 33 #4, #7).

Slow clients hold nginx connections, not gunicorn threads, in front of the collector and of
the shuffler; every error a client sees is a problem document, the ones nginx answers itself
included, while the collector's and the shuffler's own pass through untouched; a body over the
collector's limit is a 413 the client splits on, whether nginx or the collector sends it,
never a 502. Real nginx (Debian's) running the site files of deploy/, real servers, on
127.0.0.1; every loop is bounded in count and time.
"""

from __future__ import annotations

import json
import math
import re
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
import requests
import yaml

from chorus_client import Client, CollectorAPI, RequestsTransport, RetryPolicy
from chorus_client.transport import Response
from chorus_collector.problems import KINDS, PROBLEM_BASE
from chorus_collector.server.process import CollectorProcess, free_port
from chorus_collector.settings import resolve_settings
from chorus_collector.shuffler.settings import resolve_shuffler_settings
from chorus_shared import campaign_from_config
from helpers.nginx import Nginx, running_nginx
from helpers.shuffler import ShufflerProcess
from helpers.support import ADMIN, ANALYST, campaign_spec

pytestmark = [pytest.mark.slow, pytest.mark.sqlite_only]  # no storage here: once is enough
ROOT = Path(__file__).resolve().parents[2]
SITES = ("nginx.conf", "nginx-replicas.conf", "nginx-shuffler.conf")
SHUFFLER_KEY = "shuffler-key-" + "k" * 32


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[CollectorProcess, Nginx]]:
    db = tmp_path_factory.mktemp("proxy") / "chorus.db"
    # Few threads on purpose: 2 workers × 2 threads = 4 slots for 64 slow clients.
    with CollectorProcess(db, settings={"ADMIN_TOKEN": ADMIN, "WORKERS": "2",
                                        "THREADS": "2"}) as server, \
            running_nginx(server.port) as nginx:
        yield server, nginx


@pytest.fixture(scope="module")
def shuffled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ShufflerProcess, Nginx]]:
    """The shuffler behind deploy/nginx-shuffler.conf, a collector behind it. Its body limit
    (16 KiB) is below the proxy's (4 MiB)."""
    root = tmp_path_factory.mktemp("shuffled")
    with CollectorProcess(root / "chorus.db", settings={
            "ADMIN_TOKEN": ADMIN, "ANALYST_TOKEN": ANALYST, "SHUFFLER_KEY": SHUFFLER_KEY,
            "WORKERS": "1", "THREADS": "4"}) as collector, \
            ShufflerProcess(root / "pool.db", {  # 2 × 2 = 4 slots for 64 slow clients
                "COLLECTOR_URL": collector.url, "SHUFFLER_KEY": SHUFFLER_KEY,
                "ADMIN_TOKEN": ADMIN, "MIN_BATCH": "5", "MAX_BATCH": "10",
                "MAX_BODY_BYTES": str(16 * 1024),
                "FORWARD_INTERVAL": "0", "WORKERS": "2", "THREADS": "2"}) as shuffler, \
            running_nginx(shuffler.port, site="nginx-shuffler.conf") as nginx:
        yield shuffler, nginx


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[CollectorProcess, Nginx]]:
    """A collector whose body limit (16 KiB) is far below the proxy's (4 MiB)."""
    db = tmp_path_factory.mktemp("limited") / "chorus.db"
    with CollectorProcess(db, settings={"ADMIN_TOKEN": ADMIN, "ANALYST_TOKEN": ANALYST,
                                        "MAX_BODY_BYTES": str(16 * 1024), "WORKERS": "1",
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


def _silence(port: int, request: bytes, timeout: float = 10) -> bytes:
    """Send raw bytes and read until the server closes: what a client gets back, if anything."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request)
        chunks = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


def _assert_problem(status: int, headers: Mapping[str, str], body: bytes, kind: str) -> None:
    assert headers["content-type"] == "application/problem+json", (status, headers, body)
    problem = json.loads(body)
    assert problem["type"] == PROBLEM_BASE + kind
    # http-error is any other HTTP-level error, under its own status.
    assert problem["status"] == status == (status if kind == "http-error" else KINDS[kind].status)
    assert problem["title"] == KINDS[kind].title


def _client_body_limit(site: str) -> int:
    """The one ``client_max_body_size`` of a site of deploy/, in bytes."""
    sizes = re.findall(r"(?m)^\s*client_max_body_size (\d+)([km]?);",
                       (ROOT / "deploy" / site).read_text())
    assert len(sizes) == 1, sizes
    number, unit = sizes[0]
    return int(number) * {"": 1, "k": 1024, "m": 1024 * 1024}[unit]


def _victims_among_slow_clients(nginx: Nginx, victims: int = 8) -> tuple[int, list[object]]:
    """64 connections sending their headers at 2 bytes/s (for at most ~8 s each) while
    ``victims`` plain requests ask /healthz: (slow connections opened, the victims' answers)."""
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
    answers: list[object] = []
    try:
        time.sleep(1.0)  # every slow connection is open and mid-headers
        for _ in range(victims):
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
    return len(opened), answers


def test_slow_clients_do_not_starve_the_collector_behind_nginx(
        proxied: tuple[CollectorProcess, Nginx]) -> None:
    """Regression (issue 13 #2): 64 connections sending their headers at 2 bytes/s made
    /healthz fail 8 of 8 times with gunicorn facing clients (16 slots). Behind nginx, with
    4 slots, it answers every time."""
    assert _victims_among_slow_clients(proxied[1]) == (64, [200] * 8)


def test_slow_clients_do_not_starve_the_shuffler_behind_nginx(
        shuffled: tuple[ShufflerProcess, Nginx]) -> None:
    """Regression (issue 33 #4): the shuffler faced clients itself, and 64 slow connections
    made its /healthz time out (4 of 6 times with 16 slots, docs/shuffler.md). Behind
    deploy/nginx-shuffler.conf, with 4 slots, it answers every time."""
    assert _victims_among_slow_clients(shuffled[1]) == (64, [200] * 8)


@pytest.mark.parametrize("front", ["proxied", "shuffled"])
def test_errors_nginx_answers_itself_are_problem_documents(
        front: str, request: pytest.FixtureRequest) -> None:
    """Regression (issue 13 #3, issue 33 #7): gunicorn answered these as text/html, and nginx
    its own refusals (TRACE, an HTTP/2 request line, an unknown transfer coding), in front of
    the collector and of the shuffler alike."""
    nginx: Nginx = request.getfixturevalue(front)[1]
    cases = [
        (b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", "bad-request"),
        (b"GET /v1/caf\xc3\xa9 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
         "bad-request"),
        (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", "uri-too-long"),
        (b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 9000 + b"\r\n\r\n",
         "headers-too-large"),
        (b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
         b"Content-Length: 5000000\r\n\r\n", "body-too-large"),
        (b"TRACE / HTTP/1.1\r\nHost: x\r\n\r\n", "method-not-allowed"),
        (b"TRACE /v1/reports HTTP/1.1\r\nHost: x\r\nMax-Forwards: 0\r\n\r\n",
         "method-not-allowed"),
        (b"G@T / HTTP/1.1\r\nHost: x\r\n\r\n", "bad-request"),
        (b"GET / FOO/1.1\r\nHost: x\r\n\r\n", "bad-request"),
        (b"GET / HTTP/1.1\r\n\r\n", "bad-request"),  # HTTP/1.1 without Host
        (b"GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n", "http-error"),  # 505
        (b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n",
         "http-error"),  # 501
        (b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
         b"Transfer-Encoding: chunked\r\n\r\n", "bad-request"),
        (b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Length: five\r\n\r\n",
         "bad-request"),
    ]
    for raw, kind in cases:
        _assert_problem(*_raw(nginx.port, raw), kind)
    # Statuses of nginx's own refusals that have no other kind keep their status.
    assert _raw(nginx.port, cases[-4][0])[0] == 505
    assert _raw(nginx.port, cases[-3][0])[0] == 501
    # CONNECT: nginx 1.22 refuses it as a bad request, later versions with 405.
    status, headers, body = _raw(nginx.port, b"CONNECT example.com:443 HTTP/1.1\r\n"
                                             b"Host: example.com:443\r\n\r\n")
    _assert_problem(status, headers, body,
                    "bad-request" if status == 400 else "method-not-allowed")
    # A method nginx does not know goes through: the server behind answers its own 405.
    _assert_problem(*_raw(nginx.port, b"PROPFIND /healthz HTTP/1.1\r\nHost: x\r\n"
                                      b"Connection: close\r\n\r\n"), "method-not-allowed")


def test_the_collectors_own_problems_pass_through_unchanged(
        proxied: tuple[CollectorProcess, Nginx]) -> None:
    _, nginx = proxied
    reply = requests.post(f"{nginx.url}/v1/reports", data=b"{not json",
                          headers={"Content-Type": "application/json"}, timeout=10)
    assert reply.status_code == 400
    assert reply.json()["type"] == PROBLEM_BASE + "malformed-json"  # not nginx's bad-request
    assert reply.headers["Content-Type"] == "application/problem+json"
    assert requests.get(f"{nginx.url}/healthz", timeout=10).json()["status"] == "ok"


@pytest.mark.parametrize("site", SITES)
def test_no_collector_behind_nginx_is_a_problem_document(site: str) -> None:
    with running_nginx(free_port(), site) as nginx:  # nothing listens upstream
        reply = requests.get(f"{nginx.url}/healthz", timeout=10)
    assert reply.headers["Content-Type"] == "application/problem+json"
    assert reply.json()["type"] == PROBLEM_BASE + "collector-unavailable"
    assert reply.status_code == 502
    # Readable by a browser client on another origin, which then keeps its reports.
    assert reply.headers["Access-Control-Allow-Origin"] == "*"


@pytest.mark.parametrize("site", ["nginx.conf", "nginx-shuffler.conf"])
def test_an_upstream_that_never_answers_is_a_problem_document(site: str) -> None:
    """504 (nginx's read timeout, shortened from 60 s to 1 s here) answers as a 502 problem:
    a client keeps its reports and retries."""
    with socket.create_server(("127.0.0.1", 0)) as silent, \
            running_nginx(silent.getsockname()[1], site,
                          {"proxy_read_timeout 60s;": "proxy_read_timeout 1s;"}) as nginx:
        _assert_problem(*_raw(nginx.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"),
                        "collector-unavailable")


def test_nginx_failing_itself_is_a_problem_document() -> None:
    """nginx's own 500 (here: it cannot write the body it buffers to disk)."""
    with running_nginx(free_port()) as nginx:
        (nginx.root / "body").chmod(0)  # its workers run as nobody, or as the test's user
        body = b"x" * 100_000  # over client_body_buffer_size: buffered to a file
        _assert_problem(*_raw(nginx.port, b"POST /v1/reports HTTP/1.1\r\nHost: x\r\n"
                              b"Content-Length: 100000\r\n\r\n" + body), "internal-error")


def test_a_slow_client_gets_no_page_at_all() -> None:
    """nginx closes on a client over its header or body timeout (shortened from 10 s to 1 s
    here) without an answer: there is no error page for the client to misread."""
    edits = {"client_header_timeout 10s;": "client_header_timeout 1s;",
             "client_body_timeout 10s;": "client_body_timeout 1s;"}
    with running_nginx(free_port(), "nginx.conf", edits) as nginx:
        assert _silence(nginx.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n") == b""
        assert _silence(nginx.port, b"POST /v1/reports HTTP/1.1\r\nHost: x\r\n"
                                    b"Content-Length: 10\r\n\r\nab") == b""


@pytest.mark.parametrize("site", SITES)
def test_every_site_shares_the_error_pages_and_limits(site: str) -> None:
    text = (ROOT / "deploy" / site).read_text()
    assert "include /etc/nginx/chorus-errors.conf;" in text
    for directive in ("client_header_timeout 10s;", "client_body_timeout 10s;",
                      "large_client_header_buffers 4 8k;", "proxy_request_buffering on;"):
        assert directive in text, directive


@pytest.mark.parametrize("site", SITES)
def test_the_proxys_body_limit_is_the_servers(site: str) -> None:
    """Issue 33 #7: nginx's client_max_body_size is the default body limit of the server it
    fronts, and the 413 page says the same number. A proxy below the server would refuse
    what the server takes; one above it is safe (the server's 413 gets through: next test),
    but the two are kept equal so that one number is documented."""
    if site == "nginx-shuffler.conf":
        server_limit = resolve_shuffler_settings(
            environ={"CHORUS_SHUFFLER_SHUFFLER_KEY": "key"})["MAX_BODY_BYTES"]
    else:
        server_limit = resolve_settings(environ={})["MAX_BODY_BYTES"]
    assert _client_body_limit(site) == server_limit
    page = (ROOT / "deploy" / "nginx-errors.conf").read_text()
    assert f"request body is larger than {server_limit // (1024 * 1024)} MiB" in page


@pytest.mark.parametrize("front", ["limited", "shuffled"])
def test_a_server_limit_below_the_proxys_answers_413_never_502(
        front: str, request: pytest.FixtureRequest) -> None:
    """Regression (issue 33 #7): the collector refused a body over its limit before reading
    it, gunicorn reset the connection, and nginx, still sending the body, answered 502 (7 of
    40 here): a client retried the whole batch instead of splitting it. The shuffler's limit
    behaves the same."""
    nginx: Nginx = request.getfixturevalue(front)[1]
    for step in range(30):  # bodies from just over the limit to ~3 MiB, under nginx's 4 MiB
        size = 16 * 1024 + 1 + step * 100_000
        body = b'{"reports": [' + b" " * size + b"]}"
        reply = requests.post(f"{nginx.url}/v1/reports", data=body, timeout=30,
                              headers={"Content-Type": "application/json"})
        _assert_problem(reply.status_code, reply.headers, reply.content, "body-too-large")
        assert "16384 bytes" in reply.json()["detail"]  # the collector's, not nginx's
    assert "Broken pipe" not in nginx.log() and "reset by peer" not in nginx.log()
    assert requests.get(f"{nginx.url}/healthz", timeout=10).status_code == 200


class _Recording(RequestsTransport):
    """The client's own transport, remembering each answer's status and problem type."""

    def __init__(self) -> None:
        super().__init__()
        self.answers: list[tuple[int, str]] = []

    def request(self, method: str, url: str, *, body: bytes | None,
                headers: Mapping[str, str], timeout: float) -> Response:
        reply = super().request(method, url, body=body, headers=headers, timeout=timeout)
        self.answers.append((reply.status, str((reply.json_object() or {}).get("detail", ""))))
        return reply


def _send_through(nginx: Nginx, server: CollectorProcess, spec: dict[str, object],
                  values: list[object], batch_size: int) -> tuple[_Recording, int]:
    """One client sends ``values`` through nginx in one flush, with a single attempt per
    request (a 502 would keep reports): (its transport, the reports the collector counts)."""
    config = CollectorAPI(server.url, ADMIN).create_campaign(spec)
    name = str(spec["name"])
    transport = _Recording()
    client = Client(nginx.url, ephemeral=True, transport=transport, send_delay=0.0,
                    campaigns={name: campaign_from_config(config)},
                    lifetime_budget=math.inf, batch_size=batch_size,
                    retry=RetryPolicy(max_attempts=1))
    try:
        for value in values:
            assert client.report(name, value) == "queued"
        flushed = client.flush()
        assert (flushed.accepted, flushed.pending) == (len(values), 0), transport.answers
    finally:
        client.close()
    return transport, CollectorAPI(server.url, ADMIN).estimates(name)["n"]


def test_the_client_splits_a_batch_on_the_collectors_413_behind_nginx(
        limited: tuple[CollectorProcess, Nginx]) -> None:
    """A collector limit below the proxy's: the collector's 413 reaches the client, which
    halves the batch until it fits; every report is counted once."""
    server, nginx = limited
    values = [["a", "b", "c", "d"][i % 4] for i in range(1000)]  # ~150 KB in one batch
    transport, counted = _send_through(nginx, server, campaign_spec("split-collector"),
                                       values, batch_size=1000)
    statuses = [status for status, _ in transport.answers]
    assert statuses[:4] == [413] * 4  # 1,000, 500, 250 and 125 reports are over 16 KiB
    assert set(statuses) == {413, 200}
    assert all("16384 bytes" in detail for status, detail in transport.answers
               if status == 413)
    assert counted == 1000


def test_the_client_splits_a_batch_on_the_proxys_own_413(
        proxied: tuple[CollectorProcess, Nginx]) -> None:
    """A batch over nginx's 4 MiB: nginx answers the 413 itself, and the client splits on it
    as on the collector's."""
    server, nginx = proxied
    domain = [f"v{i}" for i in range(4096)]  # OUE's most: 1 KiB of hex per report
    spec = campaign_spec("split-proxy", mechanism="krr") | {
        "mechanism": "oue", "epsilon": 1.0, "domain": domain}
    values: list[object] = [domain[i % 64] for i in range(4000)]  # ~4.8 MB in one batch
    transport, counted = _send_through(nginx, server, spec, values, batch_size=4000)
    assert transport.answers[0] == (413, "request body is larger than 4 MiB; send fewer "
                                         "reports per request")  # nginx's page
    assert [status for status, _ in transport.answers[1:]] == [200, 200]
    assert counted == 4000


def test_the_proxys_problem_documents_are_in_the_catalogue() -> None:
    text = (ROOT / "deploy" / "nginx-errors.conf").read_text()
    documents = [json.loads(body) for body in re.findall(r"return \d+ '(\{.*?\})';", text)]
    assert len(documents) == 10
    for problem in documents:
        kind = problem["type"].removeprefix(PROBLEM_BASE)
        assert KINDS[kind].title == problem["title"]
        assert problem["status"] == KINDS[kind].status or kind == "http-error"


def test_the_shufflers_proxy_keeps_no_record_of_senders() -> None:
    """The shuffler drops addresses and arrival times; its proxy must not log them instead."""
    text = (ROOT / "deploy" / "nginx-shuffler.conf").read_text()
    assert re.search(r"(?m)^\s*access_log off;", text)
    assert re.search(r"(?m)^\s*error_log stderr crit;", text)
    assert "X-Forwarded-For" not in re.sub(r"#.*", "", text)


def test_reports_reach_the_collector_through_the_shufflers_proxy(
        shuffled: tuple[ShufflerProcess, Nginx]) -> None:
    """The whole path through nginx: a campaign's config, reports, a forwarding pass."""
    shuffler, nginx = shuffled
    collector = shuffler.env["CHORUS_SHUFFLER_COLLECTOR_URL"]
    CollectorAPI(collector, ADMIN).create_campaign(campaign_spec("via-proxy"))
    config = requests.get(f"{nginx.url}/v1/campaigns/via-proxy", timeout=10).json()
    client = Client(nginx.url, ephemeral=True, send_delay=0.0, lifetime_budget=math.inf,
                    campaigns={"via-proxy": campaign_from_config(config)})
    try:
        for i in range(6):
            assert client.report("via-proxy", ["a", "b", "c", "d"][i % 4]) == "queued"
        assert client.flush().accepted == 6
    finally:
        client.close()
    flushed = requests.post(f"{nginx.url}/v1/flush", timeout=30,
                            headers={"Authorization": f"Bearer {ADMIN}"})
    assert flushed.status_code == 200, flushed.text
    estimate = CollectorAPI(collector, ANALYST).estimates("via-proxy")
    assert estimate["n"] == 6 and estimate["shuffling"]["reports_direct"] == 0


def test_compose_puts_the_shuffler_behind_its_proxy() -> None:
    """Issue 33 #4: the shuffler publishes no port; an nginx of its profile does, running the
    site file and error pages these tests run."""
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    shuffler, proxy = services["shuffler"], services["proxy-shuffler"]
    assert "ports" not in shuffler and shuffler["expose"] == ["8001"]
    assert proxy["profiles"] == shuffler["profiles"] == ["shuffler"]
    assert proxy["image"] == services["proxy"]["image"]
    assert proxy["ports"] == ["8001:8001"]
    assert proxy["volumes"] == [
        "./deploy/nginx-shuffler.conf:/etc/nginx/conf.d/default.conf:ro",
        "./deploy/nginx-errors.conf:/etc/nginx/chorus-errors.conf:ro"]
    assert proxy["depends_on"]["shuffler"]["condition"] == "service_healthy"
    text = (ROOT / "deploy" / "nginx-shuffler.conf").read_text()
    assert re.search(r"(?m)^\s*server shuffler:8001[ ;]", text)
    assert re.search(r"(?m)^\s*listen 8001;", text)
    assert shuffler["environment"]["CHORUS_SHUFFLER_BIND"] == "0.0.0.0:8001"
    # Every service that publishes a port to other hosts is an nginx (Grafana, for the
    # operator's own browser, publishes on loopback only).
    for name, service in services.items():
        if "ports" in service:
            assert service["image"].startswith("nginx:") or all(
                str(port).startswith("127.0.0.1:") for port in service["ports"]), name
