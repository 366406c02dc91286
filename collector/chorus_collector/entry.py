"""The ``chorus`` console script: explains a missing ``collector`` extra, then runs the CLI."""

from __future__ import annotations

import sys
from importlib.util import find_spec

__all__ = ["main"]


def main() -> None:
    # Found, not imported: a command imports only what it uses (flask alone took 0.2 s of
    # every `chorus export`).
    missing = next((name for name in ("click", "flask", "numpy") if find_spec(name) is None),
                   None)
    if missing is not None:
        sys.stderr.write(
            f"chorus: the command line needs the collector extra ({missing} is missing):\n"
            "    pip install 'chorus-ldp[collector]'\n"
        )
        raise SystemExit(1)
    from chorus_collector.cli import main as cli

    cli()
