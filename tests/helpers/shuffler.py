"""``chorus shuffler`` as a child process on loopback, for the tests that put nginx in front.

The collector's :class:`CollectorProcess` with the shuffler's command: the same start (healthy
on ``/healthz`` or an error with its log), stop and log. Settings are the shuffler's names
(``DATABASE``, ``COLLECTOR_URL``...), passed as ``CHORUS_SHUFFLER_*`` variables.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from chorus_collector.server.process import CollectorProcess
from chorus_collector.shuffler.server import SHUFFLER_COMMAND

__all__ = ["ShufflerProcess"]


class ShufflerProcess(CollectorProcess):
    """``with ShufflerProcess(pool, settings) as shuffler: shuffler.url``."""

    def __init__(self, pool: Path, settings: Mapping[str, str]) -> None:
        super().__init__(pool, settings={f"SHUFFLER_{k}": v for k, v in settings.items()})
        self.env["CHORUS_SHUFFLER_BIND"] = f"127.0.0.1:{self.port}"
        self.env["CHORUS_SHUFFLER_DATABASE"] = str(pool)

    def command(self) -> list[str]:
        script = Path(sys.executable).with_name(SHUFFLER_COMMAND[0])
        return [str(script), *SHUFFLER_COMMAND[1:]]
