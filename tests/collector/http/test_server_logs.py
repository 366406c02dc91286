"""The server's log records: gunicorn's slow-reader traceback becomes one warning line."""

from __future__ import annotations

import json
import logging
import sys

from chorus_collector.server.logs import JSONFormatter, SlowReaderFilter, logging_config


def _record(error: BaseException) -> logging.LogRecord:
    try:
        raise error
    except BaseException:
        exc_info = sys.exc_info()
    return logging.LogRecord("gunicorn.error", logging.ERROR, __file__, 1,
                             "Socket error processing request.", (), exc_info)


def test_a_send_timeout_is_one_warning_line_without_traceback() -> None:
    record = _record(TimeoutError("timed out"))
    assert SlowReaderFilter().filter(record)
    entry = json.loads(JSONFormatter().format(record))
    assert entry["level"] == "warning"
    assert "stopped reading" in entry["message"]
    assert "exception" not in entry


def test_other_socket_errors_keep_their_level_and_traceback() -> None:
    record = _record(ConnectionResetError("reset"))
    assert SlowReaderFilter().filter(record)
    entry = json.loads(JSONFormatter().format(record))
    assert entry["level"] == "error"
    assert entry["message"] == "Socket error processing request."
    assert "ConnectionResetError" in entry["exception"]


def test_gunicorns_error_log_goes_through_the_filter() -> None:
    config = logging_config("INFO")
    assert config["loggers"]["gunicorn.error"]["filters"] == ["slow_reader"]
    assert config["filters"]["slow_reader"]["()"] is SlowReaderFilter
