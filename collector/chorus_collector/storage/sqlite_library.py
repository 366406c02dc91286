"""sqlite-utils, imported without pandas.

sqlite-utils imports pandas whenever it is installed (the ``analysis`` extra brings it), only
to map ``pandas.Timestamp`` values to TEXT columns, which Chorus never writes. That import was
a third of the start-up of every server worker and storage command (0.5 of 1.5 s of CPU to
import the app, measured): here ``import pandas`` fails for the moment sqlite-utils is
imported, and works again afterwards for what does use it (``chorus_collector.frames``).
"""

from __future__ import annotations

import sys


def _import_without_pandas() -> None:
    if "sqlite_utils.db" in sys.modules or "pandas" in sys.modules:
        return  # imported already, either of them: nothing to save
    sys.modules["pandas"] = None  # type: ignore[assignment]  # `import pandas` raises ImportError
    try:
        import sqlite_utils  # noqa: F401
    finally:
        if "pandas" in sys.modules and sys.modules["pandas"] is None:
            del sys.modules["pandas"]


_import_without_pandas()

import sqlite_utils  # noqa: E402
from sqlite_utils.migrations import Migrations  # noqa: E402

__all__ = ["Migrations", "sqlite_utils"]
