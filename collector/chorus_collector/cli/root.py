"""The ``chorus`` command group: the subcommands register on it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from chorus_collector.version import VERSION


class LazyGroup(click.Group):
    """A group whose subcommands' modules are imported when a subcommand is asked for, so
    that ``chorus export`` imports what the export needs and not what every other command
    does (the estimators and scipy, the HTTP client, the designer: most of a second of
    start-up, which an export of a few hundred thousand reports does not amortize).

    ``modules`` names, for each subcommand, the module that registers it on this group when
    imported; ``load`` imports one (the ``chorus_collector.cli`` package fills both)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.modules: dict[str, str] = {}
        self.load: Callable[[str], object] = lambda module: None

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.modules})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.modules:
            self.load(self.modules[cmd_name])
        return super().get_command(ctx, cmd_name)


@click.group(cls=LazyGroup)
@click.version_option(VERSION, prog_name="chorus")
def main() -> None:
    """Chorus: local differential privacy telemetry."""
