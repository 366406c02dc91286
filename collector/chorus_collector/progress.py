"""Progress bars for the long commands (the demo, `check-aggregates`, `rappor import`).

Shown only when stderr is a terminal: in a log, a pipe or CI the output stays exactly what
it was (tqdm's automatic check), so nothing that parses it sees a bar.
"""

from __future__ import annotations

import sys
from typing import IO, Any

from tqdm import tqdm

__all__ = ["progress_bar"]


def progress_bar(total: int | None, unit: str, description: str,
                 stream: IO[str] | None = None) -> Any:
    """A progress bar on ``stream`` (stderr), disabled unless it is a terminal."""
    return tqdm(total=total, unit=unit, desc=description, file=stream or sys.stderr,
                disable=None, leave=False, dynamic_ncols=True, mininterval=0.25)
