"""Progress bars for the long commands (the demo, `check-aggregates`, `rappor import`).

Shown only when stderr is a terminal: in a log, a pipe or CI the output stays exactly what
it was (tqdm's automatic check), so nothing that parses it sees a bar.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from typing import IO, Any, TypeVar

from tqdm import tqdm

__all__ = ["progress_bar", "staged"]


def progress_bar(total: int | None, unit: str, description: str,
                 stream: IO[str] | None = None) -> Any:
    """A progress bar on ``stream`` (stderr), disabled unless it is a terminal."""
    return tqdm(total=total, unit=unit, desc=description, file=stream or sys.stderr,
                disable=None, leave=False, dynamic_ncols=True, mininterval=0.25)


T = TypeVar("T")


def staged(stages: Sequence[tuple[str, T]], description: str,
           stream: IO[str] | None = None) -> Iterator[tuple[str, T]]:
    """Each (name, stage) in turn, with a bar of stages that names the one running (a
    benchmark's sections): on a terminal only, like every bar here."""
    with progress_bar(len(stages), "stage", description, stream) as bar:
        for name, stage in stages:
            bar.set_postfix_str(name, refresh=True)
            yield name, stage
            bar.update()
