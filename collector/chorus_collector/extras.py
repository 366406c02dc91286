"""Optional extras imported on demand, each missing one explained in one line.

The collector runs without the ``dask`` extra; only the commands that use a cluster or
Parquet import it, through ``require``, so a missing package says what to install instead
of raising a bare ``ModuleNotFoundError`` from deep inside a job.
"""

from __future__ import annotations

import importlib

__all__ = ["ExtraMissing", "require"]


class ExtraMissing(ImportError):
    """A feature needs an optional extra that is not installed."""


def require(module: str, extra: str, feature: str) -> None:
    """Import ``module`` or raise ``ExtraMissing`` naming the extra that brings it (callers
    then import it by name, so type checkers see the real module)."""
    try:
        importlib.import_module(module)
    except ImportError as error:
        raise ExtraMissing(
            f"{feature} needs the {extra} extra ({module} is not installed): "
            f"pip install 'chorus-ldp[{extra}]'") from error
