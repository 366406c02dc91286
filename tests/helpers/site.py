"""A web app's own site for browser tests: a folder of static files served on 127.0.0.1 at a
free port, so that its pages run on another origin than the collector's (as an app's do)."""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar


class _QuietFiles(SimpleHTTPRequestHandler):
    extensions_map: ClassVar[dict[str, str]] = {**SimpleHTTPRequestHandler.extensions_map,
                      ".js": "text/javascript", ".mjs": "text/javascript"}

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def static_site(folder: Path) -> Iterator[str]:
    """Serve ``folder`` on loopback; yields the site's origin (``http://127.0.0.1:PORT``)."""
    handler = functools.partial(_QuietFiles, directory=str(folder))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="static-site", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
