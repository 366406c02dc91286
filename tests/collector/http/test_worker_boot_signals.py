"""A stop signal that reaches a gunicorn worker while it boots, before its own handlers are in,
still stops it (CI once saw a SIGTERM right after start-up take graceful_timeout, then -9; a
suite run saw it again with the signal before the post_fork hook)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.slow

GRACEFUL = 20  # seconds the master waits for its workers before SIGKILL

# A real gunicorn master and one worker, through the collector's own GunicornApp and options.
# The worker, as it boots, asks its master to stop and sleeps in one of two windows before its
# handlers are in, so that the master's SIGTERM reaches it there (as a loaded machine's
# scheduler can arrange by itself): right after the fork, where gunicorn names the process
# before any hook runs, or just before the worker installs its own handlers.
SERVER = textwrap.dedent(f"""
    import os, signal, sys, time
    from flask import Flask
    from gunicorn import util
    from gunicorn.workers.base import Worker
    from chorus_collector.server.gunicorn import GunicornApp, gunicorn_options

    def ask_the_master_to_stop():
        os.kill(os.getppid(), signal.SIGTERM)
        time.sleep(2)

    if sys.argv[1] == "after-fork":
        name = util._setproctitle

        def late_name(title):
            if title.startswith("worker"):
                ask_the_master_to_stop()
            name(title)

        util._setproctitle = late_name
    else:
        handlers_in = Worker.init_signals

        def late_handlers(self):
            ask_the_master_to_stop()
            handlers_in(self)

        Worker.init_signals = late_handlers
    settings = {{"BIND": "127.0.0.1:0", "WORKERS": 1, "THREADS": 2, "LOG_LEVEL": "INFO"}}
    options = {{**gunicorn_options(settings, "boot-signal-test", timeout=60),
               "graceful_timeout": {GRACEFUL}}}
    GunicornApp(Flask("boot"), options).run()
""")


@pytest.mark.parametrize("window", ["after-fork", "before-handlers"])
def test_a_sigterm_that_reaches_a_booting_worker_stops_it_without_the_sigkill(
        window: str) -> None:
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-c", SERVER, window], capture_output=True, text=True,
                         timeout=GRACEFUL * 3)
    took = time.monotonic() - started
    assert run.returncode == 0, run.stderr
    assert "SIGKILL" not in run.stderr, run.stderr
    # The master's wait ended because its worker exited, not at graceful_timeout.
    assert took < GRACEFUL, (took, run.stderr)
    assert "Worker exiting" in run.stderr
