"""Every collector setting in one registry: name, type, default and help.

``create_app(config)`` applies the defaults, then ``CHORUS_<NAME>`` environment variables,
then the ``config`` mapping. Unknown keys and values of the wrong type fail at startup with a
hint, and a test checks that every setting is documented in docs/deployment.md.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["SETTINGS", "Setting", "SettingsError", "resolve_settings"]


class SettingsError(ValueError):
    """A setting is unknown or has a value of the wrong type."""


@dataclass(frozen=True)
class Setting:
    name: str
    type: type
    default: Any
    help: str
    secret: bool = False


SETTINGS: tuple[Setting, ...] = (
    Setting("DATABASE", str, "chorus.db",
            "Path of the SQLite database file (created if absent), or a postgresql:// URL "
            "that several collectors share."),
    Setting("ADMIN_TOKEN", str, None,
            "Bearer token for creating and listing campaigns; unset disables admin calls.",
            secret=True),
    Setting("ANALYST_TOKEN", str, None,
            "Bearer token for reading estimates (the admin token works too).", secret=True),
    Setting("SECRET_KEY", str, None,
            "Key that signs the dashboard's session cookies; unset: derived from the admin and "
            "analyst tokens (every worker agrees, and changing a token signs everyone out).",
            secret=True),
    Setting("SESSION_HOURS", int, 12, "Hours a dashboard sign-in lasts."),
    Setting("SECURE_COOKIES", int, 0,
            "1: the dashboard's session cookie is sent over HTTPS only (set it behind TLS)."),
    Setting("MAX_BODY_BYTES", int, 4 * 1024 * 1024,
            "Largest request body accepted; larger bodies get 413."),
    Setting("MAX_REPORTS_PER_REQUEST", int, 10_000,
            "Most reports in one batch; more get 413."),
    Setting("MAX_PAYLOAD_BYTES", int, 8192,
            "Largest payload of one report (canonical JSON bytes); larger ones are rejected."),
    Setting("MAX_CANDIDATES", int, 10_000, "Most candidate strings in one RAPPOR query."),
    Setting("QUERY_CONCURRENCY", int, 2,
            "Estimate queries computed at once per worker process (a RAPPOR decode at the "
            "candidate limit takes about 0.5 GB); more wait."),
    Setting("QUERY_WAIT", int, 10,
            "Seconds a query waits for its turn before a 503 query-busy with Retry-After (and "
            "a client has, at least 5, to read its answer)."),
    Setting("QUERY_THREADS", int, 0,
            "Estimate queries admitted at once per worker process (computing, waiting for "
            "their turn or sending their answer); more are refused at once with 503 "
            "query-busy, so the other threads always serve reports and /healthz. 0: half of "
            "THREADS (at least 1)."),
    Setting("INGEST_KEY", str, None,
            "Optional key apps must send (Authorization: Bearer) to submit reports.",
            secret=True),
    Setting("SHUFFLER_KEY", str, None,
            "Key the shuffler sends (Authorization: Bearer) with Chorus-Shuffled-Batch; "
            "unset: every report counts as sent directly.", secret=True),
    Setting("METRICS_TOKEN", str, None,
            "Bearer token for /metrics; unset leaves /metrics open (keep it internal).",
            secret=True),
    Setting("RATE_LIMIT", int, 0,
            "Report requests per second allowed per client address (0: no limit); each "
            "worker process counts separately."),
    Setting("RATE_BURST", int, 50, "Requests a client address may send at once above the rate."),
    Setting("CORS_ORIGINS", str, "*",
            "Origins whose web pages may read the answers of the client routes (a campaign's "
            "config, reports) from a browser: * (any; no credentials are ever allowed), a "
            "comma-separated list (https://app.example.com), or empty (none)."),
    Setting("PROXY_HOPS", int, 0,
            "Reverse proxies in front of the collector whose X-Forwarded-For is trusted for "
            "the client address (rate limiting only)."),
    Setting("SQLITE_SYNCHRONOUS", str, "FULL",
            "SQLite synchronous mode: FULL makes every acknowledged report survive power loss; "
            "NORMAL survives process crashes only."),
    Setting("COMMIT_WAIT_US", int, 0,
            "Microseconds a group commit waits for its group to outgrow the last one, when "
            "the last held more than one writer (0: never). With many independent clients "
            "sending single reports it saves CPU under load (1000: about 6%); with a few "
            "writers in a tight loop every transaction waits it out."),
    Setting("FOLD_INTERVAL", int, 2,
            "Seconds between folds of new reports into the statistics, in each server worker "
            "(0: none; then run `chorus aggregate --follow` beside the servers). Estimates "
            "are complete either way: they map the unfolded tail at query time."),
    Setting("PUBLIC_URL", str, None,
            "The dashboard's address as people reach it (e.g. https://chorus.example.com), "
            "which alert notifications link to; unset: they carry a relative link."),
    Setting("BIND", str, "127.0.0.1:8000", "Address the production server listens on."),
    Setting("WORKERS", int, 2, "Production server worker processes."),
    Setting("THREADS", int, 8, "Threads per worker process."),
    Setting("LOG_LEVEL", str, "INFO", "Python logging level for the collector."),
)
# CHORUS_* variables read by the CLI and client, not by the collector app (and the test
# suite's folder for browser screenshots, which a shell may export while a collector runs).
_NON_APP_ENV = {"URL", "TOKEN", "SCREENSHOTS"}


def coerce_setting(setting: Setting, value: object, source: str) -> Any:
    if value is None:
        return None
    if setting.type is int:
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                raise SettingsError(
                    f"{source}: {setting.name} must be an integer, got {value!r}"
                ) from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise SettingsError(f"{source}: {setting.name} must be an integer, got {value!r}")
        return value
    if not isinstance(value, str):
        raise SettingsError(f"{source}: {setting.name} must be a string, got {value!r}")
    return value


def read_settings(settings: Sequence[Setting], prefix: str, *, config: Mapping[str, Any] | None,
                  environ: Mapping[str, str], others: Callable[[str], bool],
                  what: str = "setting", lowercase_config_is_ours: bool = False,
                  ) -> dict[str, Any]:
    """Defaults, then ``<prefix><NAME>`` environment variables, then ``config``: an unknown
    name in the namespace (unless ``others`` says it belongs to another program) or a value
    of the wrong type stops the start with a hint. The collector and the shuffler share it."""
    by_name = {s.name: s for s in settings}

    def unknown(name: str, source: str) -> SettingsError:
        close = difflib.get_close_matches(name, by_name, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; known: {sorted(by_name)}"
        return SettingsError(f"{source}: unknown {what} {name!r}{hint}")

    values = {s.name: s.default for s in settings}
    for key, raw in environ.items():
        if not key.startswith(prefix):
            continue
        name = key.removeprefix(prefix)
        if others(name):
            continue
        if name not in by_name:
            raise unknown(name, f"environment variable {key}")
        values[name] = coerce_setting(by_name[name], raw, f"environment variable {key}")
    for name, raw in (config or {}).items():
        if name in by_name:
            values[name] = coerce_setting(by_name[name], raw, "config")
        elif not (lowercase_config_is_ours and not name.isupper()):
            raise unknown(name, "config")
    return values


def resolve_settings(config: Mapping[str, Any] | None = None,
                     environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Defaults, then ``CHORUS_*`` environment variables, then ``config``."""
    values = read_settings(
        SETTINGS, "CHORUS_", config=config, environ=os.environ if environ is None else environ,
        # The CLI's own variables, and the shuffler's CHORUS_SHUFFLER_* settings.
        others=lambda name: name in _NON_APP_ENV or (name.startswith("SHUFFLER_")
                                                     and name != "SHUFFLER_KEY"),
        lowercase_config_is_ours=True)
    if values["SQLITE_SYNCHRONOUS"] not in ("FULL", "NORMAL", "EXTRA"):
        raise SettingsError("SQLITE_SYNCHRONOUS must be FULL, NORMAL or EXTRA")
    for name in ("MAX_BODY_BYTES", "MAX_REPORTS_PER_REQUEST", "MAX_CANDIDATES", "WORKERS",
                 "THREADS", "MAX_PAYLOAD_BYTES", "RATE_BURST", "SESSION_HOURS"):
        if values[name] < 1:
            raise SettingsError(f"{name} must be at least 1")
    if values["RATE_LIMIT"] < 0 or values["PROXY_HOPS"] < 0 or values["FOLD_INTERVAL"] < 0 \
            or values["QUERY_THREADS"] < 0 or values["COMMIT_WAIT_US"] < 0:
        raise SettingsError("RATE_LIMIT, PROXY_HOPS, FOLD_INTERVAL, QUERY_THREADS and "
                            "COMMIT_WAIT_US must be 0 (off, or automatic) or positive")
    public = values["PUBLIC_URL"]
    if public is not None and not public.startswith(("http://", "https://")):
        raise SettingsError("PUBLIC_URL must start with http:// or https://")
    if values["SECURE_COOKIES"] not in (0, 1):
        raise SettingsError("SECURE_COOKIES must be 0 or 1")
    return values
