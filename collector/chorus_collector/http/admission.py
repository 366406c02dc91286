"""Admission of estimate queries: analysts never starve ingest of server threads.

Every route of a worker shares its gunicorn threads (``CHORUS_THREADS``), and gthread hands
a request to the next free thread whatever its path, so a thread that a query holds is one
that ingest and ``/healthz`` cannot have. A query holds one from the moment it asks for its
turn until its answer is sent. Queries that waited for their turn inside the app held so many
that 16 analysts made ingest time out (issue 33 #3). So, per worker:

* at most ``QUERY_THREADS`` queries are admitted at once (computing, waiting for one of the
  ``QUERY_CONCURRENCY`` slots, or sending their answer), decided without blocking: past that
  a query is refused at once (503 ``query-busy``, ``Retry-After``). The other threads stay
  free for everything else;
* an admitted query waits at most ``QUERY_WAIT`` seconds for a slot, then is refused;
* its answer is produced whole before the first byte is sent (a discovery campaign's
  dashboard page excepted: it is streamed as its walks run, holding its slot), and under
  gunicorn it counts against ``QUERY_THREADS`` until it is sent: a client that does not read
  a send within ``QUERY_WAIT`` (at least ``SEND_FLOOR``) seconds is cut off (the socket's send
  timeout), so a slow reader holds one of the query threads for a bounded time, never an
  ingest one. Behind the deployment's nginx (``proxy_buffering on``) the proxy takes a whole
  answer at once anyway.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from flask import Flask, Response, current_app, g, request

from chorus_collector.problems import Problem

__all__ = ["SEND_FLOOR", "QueryAdmission", "admission", "install_admission", "query_threads"]

T = TypeVar("T")
SEND_FLOOR = 5.0  # seconds: the least a client is given to read an answer
_HELD = "chorus_query_thread"  # flask.g: the admission whose thread this request holds


def query_threads(threads: int, setting: int) -> int:
    """The queries a worker admits at once: ``QUERY_THREADS``, or 0 for half of its threads
    (at least one)."""
    return setting if setting > 0 else max(1, threads // 2)


def _busy(detail: str) -> Problem:
    return Problem("query-busy", detail, headers={"Retry-After": "5"})


class QueryAdmission:
    """One worker's bound on the threads queries hold and on the queries computed at once."""

    def __init__(self, *, concurrency: int, threads: int, wait: float) -> None:
        self.threads = threads
        self.wait = wait
        #: One per admitted query, until its answer is sent.
        self.admitted = threading.BoundedSemaphore(threads)
        #: The compute slots (``app.extensions["chorus.query_gate"]``).
        self.slots = threading.BoundedSemaphore(max(1, min(concurrency, threads)))

    def run(self, work: Callable[[], T]) -> T:
        """Admit this request's query (or refuse it at once), wait up to ``wait`` seconds for
        a slot (or refuse it), then compute it. The request holds its query thread until its
        answer is sent (:func:`install_admission`)."""
        self.enter()
        try:
            return work()
        finally:
            self.slots.release()

    def enter(self) -> None:
        """``run``'s admission and wait for a slot, for a computation that outlives the call
        (a streamed page): the caller releases ``slots`` when it is done."""
        if g.get(_HELD) is None:
            if not self.admitted.acquire(blocking=False):
                raise _busy(f"{self.threads} estimate queries are already running or waiting "
                            "in this worker (the rest of its threads are kept for reports); "
                            "retry shortly")
            setattr(g, _HELD, self)
        if not self.slots.acquire(timeout=self.wait):
            raise _busy("as many estimate queries as this worker computes at once are "
                        f"running, and none finished within {self.wait:g} s; retry shortly")

    def release(self) -> None:
        self.admitted.release()

    def send_timeout(self) -> float:
        return max(self.wait, SEND_FLOOR)


def install_admission(app: Flask, admission: QueryAdmission) -> None:
    """Give a query's thread back once its answer is sent (or at the end of the request when
    the server does not say when that is), and bound how long sending may take."""
    app.extensions["chorus.queries"] = admission
    app.extensions["chorus.query_gate"] = admission.slots

    @app.after_request
    def hand_over(response: Response) -> Response:
        held: QueryAdmission | None = g.pop(_HELD, None)
        if held is None:
            return response
        # gunicorn gives the app its socket, and closes the response after the last byte
        # went out (or sending failed): the thread is given back then. Another server (the
        # test client, werkzeug's) may never close it, so there it is given back now.
        sock = request.environ.get("gunicorn.socket")
        if sock is None:
            held.release()
            return response
        # Blocking sends of the answer (whole, or a streamed page's chunks), each bounded.
        # gunicorn makes the socket blocking again (no timeout) for the connection's next
        # request.
        sock.settimeout(held.send_timeout())
        response.call_on_close(held.release)
        return response

    @app.teardown_request
    def give_back(error: BaseException | None) -> None:
        del error
        held: QueryAdmission | None = g.pop(_HELD, None)
        if held is not None:  # no response went out (an unhandled error): nothing to send
            held.release()


def admission() -> QueryAdmission:
    """This app's query admission."""
    found: QueryAdmission = current_app.extensions["chorus.queries"]
    return found
