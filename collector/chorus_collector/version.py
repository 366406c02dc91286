"""The installed version of Chorus, for ``chorus --version``, ``/healthz`` and the
``chorus_build_info`` metric (never sent by clients: their headers are generic)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["VERSION"]

try:
    VERSION = version("chorus-ldp")
except PackageNotFoundError:  # run from a source tree that was never installed
    VERSION = "0+unknown"
