"""The shuffler's settings: defaults, then ``CHORUS_SHUFFLER_<NAME>`` variables, then a mapping.

The same rules as the collector's (:mod:`chorus_collector.settings`): an unknown variable in
the shuffler's namespace or a value of the wrong type stops the start with a hint.
``CHORUS_SHUFFLER_KEY`` is the *collector's* setting (it lives in the collector's namespace,
``CHORUS_<NAME>``), so the shuffler skips it; its own copy of the key is
``CHORUS_SHUFFLER_SHUFFLER_KEY``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from chorus_collector.settings import SETTINGS, Setting, SettingsError, read_settings
from chorus_shared.admission import MIN_SECRET_LENGTH

__all__ = ["ENV_PREFIX", "SHUFFLER_SETTINGS", "resolve_shuffler_settings"]

ENV_PREFIX = "CHORUS_SHUFFLER_"
# The collector's default body limit: batches sized to it pass a collector left at defaults.
_COLLECTOR_BODY_LIMIT = next(s.default for s in SETTINGS if s.name == "MAX_BODY_BYTES")

SHUFFLER_SETTINGS: tuple[Setting, ...] = (
    Setting("DATABASE", str, "chorus-shuffler.db",
            "Path of the shuffler's SQLite pool (created if absent)."),
    Setting("COLLECTOR_URL", str, "http://127.0.0.1:8000",
            "Base URL of the collector that shuffled batches go to."),
    Setting("SHUFFLER_KEY", str, None,
            "Bearer key the collector knows as CHORUS_SHUFFLER_KEY; required.", secret=True),
    Setting("ADMIN_TOKEN", str, None,
            "Bearer token for POST /v1/flush; unset disables it.", secret=True),
    Setting("ADMISSION_SECRETS", str, None,
            "Comma-separated secrets shared with the app's backend only, which mints admission "
            "credentials with them (several during a rotation). Set: POST /v1/reports needs "
            "a valid credential, and MIN_BATCH counts distinct admitted senders. Unset: anyone "
            "may post, and the collector states its central bound as assuming no injected "
            "reports.", secret=True),
    Setting("MIN_BATCH", int, 1000,
            "Fewest distinct admitted senders (without admission: reports) of one campaign "
            "and time bucket forwarded together; smaller groups stay pooled. The n of the "
            "central privacy bound."),
    Setting("MAX_REPORTS_PER_SENDER", int, 1,
            "With admission: most reports one sender may have waiting in one group "
            "(campaign and time bucket); more are rejected (sender-limit)."),
    Setting("MAX_BATCH", int, 5000,
            "Most reports in one forwarded batch (at least 2 x MIN_BATCH, so that a large "
            "group splits into batches of at least MIN_BATCH)."),
    Setting("MAX_BATCH_BYTES", int, _COLLECTOR_BODY_LIMIT,
            "Most bytes in the body of one forwarded batch: a larger group splits into more "
            "batches, never below MIN_BATCH. Keep it at most the collector's MAX_BODY_BYTES "
            "(and its proxy's body limit)."),
    Setting("FORWARD_INTERVAL", int, 10,
            "Seconds between forwarding passes of the background thread (0: none, 3600 at "
            "most)."),
    Setting("FORWARD_TIMEOUT", int, 60, "Seconds a forward to the collector may take."),
    Setting("CAMPAIGN_CACHE_SECONDS", int, 60,
            "Seconds a proxied campaign config is served from memory (0: no cache)."),
    Setting("MAX_BODY_BYTES", int, 4 * 1024 * 1024,
            "Largest request body accepted; larger bodies get 413."),
    Setting("MAX_REPORTS_PER_REQUEST", int, 10_000, "Most reports in one request; more get 413."),
    Setting("MAX_PAYLOAD_BYTES", int, 8192,
            "Largest payload of one report (canonical JSON bytes); larger ones are rejected."),
    Setting("CORS_ORIGINS", str, "*",
            "Origins whose web pages may read the answers of the client routes (a campaign's "
            "config, reports) from a browser: * (any; no credentials are ever allowed), a "
            "comma-separated list (https://app.example.com), or empty (none)."),
    Setting("BIND", str, "127.0.0.1:8001", "Address the shuffler listens on."),
    Setting("WORKERS", int, 2, "Server worker processes."),
    Setting("THREADS", int, 8, "Threads per worker process."),
    Setting("LOG_LEVEL", str, "INFO", "Python logging level for the shuffler."),
)
# In the CHORUS_SHUFFLER_ namespace but read by the collector (CHORUS_SHUFFLER_KEY).
_NOT_OURS = {"KEY"}


def resolve_shuffler_settings(config: Mapping[str, Any] | None = None,
                              environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Defaults, then ``CHORUS_SHUFFLER_*`` environment variables, then ``config``."""
    values = read_settings(SHUFFLER_SETTINGS, ENV_PREFIX, config=config,
                           environ=os.environ if environ is None else environ,
                           others=lambda name: name in _NOT_OURS, what="shuffler setting")
    if not values["SHUFFLER_KEY"]:
        raise SettingsError("the shuffler needs SHUFFLER_KEY (CHORUS_SHUFFLER_SHUFFLER_KEY): "
                            "the collector records a batch as shuffled only with it")
    for name in ("MIN_BATCH", "MAX_BATCH", "MAX_BATCH_BYTES", "FORWARD_TIMEOUT",
                 "MAX_BODY_BYTES", "MAX_REPORTS_PER_REQUEST", "MAX_PAYLOAD_BYTES", "WORKERS",
                 "THREADS", "MAX_REPORTS_PER_SENDER"):
        if values[name] < 1:
            raise SettingsError(f"{name} must be at least 1")
    values["ADMISSION_SECRETS"] = _admission_secrets(values["ADMISSION_SECRETS"])
    # A group splits by senders, each sender's reports whole into one batch: a batch of
    # MAX_BATCH / 2 reports or more then still holds MIN_BATCH senders (docs/shuffler.md).
    per_sender = values["MAX_REPORTS_PER_SENDER"] if values["ADMISSION_SECRETS"] else 1
    if values["MAX_BATCH"] < 2 * values["MIN_BATCH"] * per_sender:
        raise SettingsError("MAX_BATCH must be at least 2 x MIN_BATCH (x MAX_REPORTS_PER_SENDER "
                            "with admission), so that every batch split from a large group "
                            "still has MIN_BATCH senders")
    if not 0 <= values["FORWARD_INTERVAL"] <= 3600:
        raise SettingsError("FORWARD_INTERVAL must be 0 (no background thread) to 3600 s")
    if values["CAMPAIGN_CACHE_SECONDS"] < 0:
        raise SettingsError("CAMPAIGN_CACHE_SECONDS must be 0 (off) or positive")
    values["COLLECTOR_URL"] = values["COLLECTOR_URL"].rstrip("/")
    if not values["COLLECTOR_URL"].startswith(("http://", "https://")):
        raise SettingsError("COLLECTOR_URL must be an http:// or https:// URL")
    return values


def _admission_secrets(raw: str | None) -> tuple[str, ...]:
    """The configured secrets; empty (admission off) when unset or blank, as Compose passes an
    unset variable through as an empty string."""
    keys = tuple(part.strip() for part in (raw or "").split(",") if part.strip())
    for key in keys:
        if len(key) < MIN_SECRET_LENGTH:
            raise SettingsError(f"each of ADMISSION_SECRETS needs at least {MIN_SECRET_LENGTH} "
                                "characters (python -c 'import secrets; "
                                "print(secrets.token_hex(32))')")
    return keys
