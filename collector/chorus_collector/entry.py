"""The ``chorus`` console script: explains a missing ``collector`` extra, then runs the CLI."""

from __future__ import annotations

import sys

__all__ = ["main"]


def main() -> None:
    try:
        import click  # noqa: F401
        import flask  # noqa: F401
        import numpy  # noqa: F401
    except ImportError as error:
        sys.stderr.write(
            f"chorus: the command line needs the collector extra ({error.name} is missing):\n"
            "    pip install 'chorus-ldp[collector]'\n"
        )
        raise SystemExit(1) from None
    from chorus_collector.cli import main as cli

    cli()
