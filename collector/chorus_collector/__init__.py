"""chorus_collector: the Chorus collector service.

Ingests perturbed reports over HTTP, stores them in SQLite, keeps per-bucket sufficient
statistics and answers unbiased estimates with standard errors and confidence intervals.
"""

from chorus_collector.app import create_app
from chorus_collector.settings import SETTINGS, SettingsError
from chorus_collector.storage import SchemaError

__all__ = ["SETTINGS", "SchemaError", "SettingsError", "create_app"]
