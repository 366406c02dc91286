"""The ``chorus`` command group: the subcommands register on it."""

from __future__ import annotations

import click

from chorus_collector.version import VERSION


@click.group()
@click.version_option(VERSION, prog_name="chorus")
def main() -> None:
    """Chorus: local differential privacy telemetry."""
