"""chorus_collector: the Chorus collector service.

Ingests perturbed reports over HTTP, stores them in SQLite, keeps per-bucket sufficient
statistics and answers unbiased estimates with standard errors and confidence intervals.

Names are imported lazily, so that ``chorus_collector.entry`` can explain a missing
``collector`` extra instead of failing on ``import flask``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from chorus_collector.compat import install_aliases

if TYPE_CHECKING:
    from chorus_collector.app import create_app
    from chorus_collector.settings import SETTINGS, SettingsError
    from chorus_collector.shuffler.app import create_shuffler_app
    from chorus_collector.storage import SchemaError

__all__ = ["SETTINGS", "SchemaError", "SettingsError", "create_app", "create_shuffler_app"]

_WHERE = {"create_app": "app", "SETTINGS": "settings", "SettingsError": "settings",
          "SchemaError": "storage", "create_shuffler_app": "shuffler.app"}

install_aliases()


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'chorus_collector' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"chorus_collector.{_WHERE[name]}"), name)
