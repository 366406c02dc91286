"""One log format for everything a Chorus server writes: a JSON object per line.

The collector's own records (``chorus.*``) and gunicorn's (``gunicorn.error``: workers
booting, timeouts, signals) share the formatter, so a log pipeline parses one shape:
``{"time", "level", "logger", "message"}`` and ``exception`` when there is one. What the
records say is already limited (method, path, status and latency; never a client address, a
body or a token), and this changes only how they are written.
"""

from __future__ import annotations

import json
import logging
import logging.config
from datetime import UTC, datetime
from typing import Any

__all__ = ["JSONFormatter", "SlowReaderFilter", "configure_logging", "logging_config"]


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(
                timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


class SlowReaderFilter(logging.Filter):
    """gunicorn logs a traceback at error level when a send times out; for a query whose
    client stopped reading, that is the admission's send timeout working as meant
    (docs/reliability.md): one warning line instead, no traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if (record.getMessage() == "Socket error processing request."
                and record.exc_info and isinstance(record.exc_info[1], TimeoutError)):
            record.msg = ("a client stopped reading its answer: the connection was closed "
                          "after the send timeout")
            record.args = ()
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.exc_info = record.exc_text = None
        return True


def logging_config(level: str) -> dict[str, Any]:
    """A ``logging.config.dictConfig`` mapping; gunicorn takes it as ``logconfig_dict``."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JSONFormatter}},
        "filters": {"slow_reader": {"()": SlowReaderFilter}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "json",
                                "stream": "ext://sys.stderr"}},
        "root": {"level": "WARNING", "handlers": ["stderr"]},
        "loggers": {
            "chorus": {"level": level, "handlers": ["stderr"], "propagate": False},
            "gunicorn.error": {"level": level, "handlers": ["stderr"], "propagate": False,
                               "filters": ["slow_reader"]},
            # No access log: it would record client addresses.
            "gunicorn.access": {"level": "CRITICAL", "handlers": [], "propagate": False},
        },
    }


def configure_logging(level: str) -> None:
    logging.config.dictConfig(logging_config(level))
