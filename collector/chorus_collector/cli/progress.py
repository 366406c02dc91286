"""Progress for the long commands (the demo, `check-aggregates`, `rappor import`).

On a terminal, a bar. Anywhere else (an IDE pane, a CI log, `tee`), a plain line on stderr
every ``LINE_INTERVAL`` seconds while a step runs, and none for a step that ends sooner: a
long step is never silent for minutes, and the short ones leave the output as it was. Nothing
goes to stdout, which commands keep for what they print.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any, TypeVar

from tqdm import tqdm

__all__ = ["LINE_INTERVAL", "progress_bar", "staged"]

#: Seconds between two progress lines where there is no terminal.
LINE_INTERVAL = 10.0


class ProgressLines:
    """tqdm's few methods the commands use, as a line every ``interval`` seconds."""

    def __init__(self, total: int | None, unit: str, description: str, stream: IO[str],
                 interval: float = LINE_INTERVAL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.total, self.unit, self.description = total, unit, description
        self.stream, self.interval, self.clock = stream, interval, clock
        self.n = 0
        self.postfix = ""
        self.start = clock()
        self.next_line = self.start + interval

    def update(self, count: int = 1) -> None:
        self.n += count
        now = self.clock()
        if now >= self.next_line:
            self.next_line = now + self.interval
            self.stream.write(self.line(now) + "\n")
            self.stream.flush()

    def line(self, now: float) -> str:
        units = self.unit if self.n == 1 else self.unit + "s"
        done = (f"{self.n:,} of {self.total:,} {units} ({self.n / self.total:.0%})"
                if self.total else f"{self.n:,} {units}")
        postfix = f" [{self.postfix}]" if self.postfix else ""
        return f"{self.description}: {done}{postfix}, {now - self.start:.0f} s"

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        self.postfix = text

    def close(self) -> None:
        pass

    def __enter__(self) -> ProgressLines:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress_bar(total: int | None, unit: str, description: str,
                 stream: IO[str] | None = None) -> Any:
    """A progress bar on ``stream`` (stderr) if it is a terminal, else progress lines."""
    stream = stream or sys.stderr
    isatty = getattr(stream, "isatty", None)
    if not (callable(isatty) and isatty()):
        return ProgressLines(total, unit, description, stream)
    return tqdm(total=total, unit=unit, desc=description, file=stream, leave=False,
                dynamic_ncols=True, mininterval=0.25)


T = TypeVar("T")


def staged(stages: Sequence[tuple[str, T]], description: str,
           stream: IO[str] | None = None) -> Iterator[tuple[str, T]]:
    """Each (name, stage) in turn, with a bar of stages that names the one running (a
    benchmark's sections)."""
    with progress_bar(len(stages), "stage", description, stream) as bar:
        for name, stage in stages:
            bar.set_postfix_str(name, refresh=True)
            yield name, stage
            bar.update()
