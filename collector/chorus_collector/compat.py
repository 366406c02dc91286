"""The collector's module paths before it was split into packages (0.x), kept importable.

Each old path is an alias of the module that now holds the code: ``import
chorus_collector.simulate`` gives the very module object ``chorus_collector.design.simulate``
(so a monkeypatch through either name is seen by both), with a :class:`DeprecationWarning`
naming the new path. ``storage``, ``results`` and ``shuffler`` became packages of the same
name that export what the old modules did, and so does ``ingest``, so they need no alias;
``server`` (gunicorn's wiring, behind ``chorus serve``) was never for import.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

__all__ = ["MOVED", "install_aliases"]

#: Old module (under ``chorus_collector.``) → where it lives now.
MOVED: dict[str, str] = {
    "api": "http.api", "auth": "http.auth", "openapi": "http.openapi",
    "query_args": "http.query_args", "ratelimit": "http.ratelimit", "metrics": "http.metrics",
    "shuffled_batches": "ingest.shuffled_batches",
    "shuffling": "ingest.shuffling", "rappor_compat": "ingest.rappor_compat",
    "storage_postgres": "storage.postgres", "folding": "jobs.folding",
    "aggregate": "jobs.aggregate", "distributed": "jobs.distributed", "export": "jobs.export",
    "results_distribution": "results.distribution", "results_record": "results.record",
    "formatting": "cli.formatting", "formatting_analysis": "cli.formatting_analysis",
    "formatting_record": "kinds.record", "designer": "design.designer",
    "design_request": "design.request", "design_simulation": "design.simulation",
    "simulate": "design.simulate", "shuffler_server": "shuffler.server",
    "shuffler_forward": "shuffler.forward", "shuffler_pool": "shuffler.pool",
    "shuffler_settings": "shuffler.settings", "logs": "server.logs",
    "process": "server.process", "demo": "cli.demo", "progress": "cli.progress",
}

_PACKAGE = __name__.rpartition(".")[0]


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(f"{spec.name} moved to {self.target}; import it from there",
                      DeprecationWarning, stacklevel=2)
        module = importlib.import_module(self.target)
        self.target_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The target module ran when it was imported; importing the alias must not run it
        # again (module-level state, such as a Flask blueprint, exists once). The import
        # system has set the alias's spec on the module: it keeps its own.
        module.__spec__ = self.target_spec


class _AliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: object = None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:
        package, _, name = fullname.rpartition(".")
        if package != _PACKAGE or name not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(f"{_PACKAGE}.{MOVED[name]}"))


def install_aliases() -> None:
    """Make the old paths importable (once per process)."""
    if not any(isinstance(finder, _AliasFinder) for finder in sys.meta_path):
        sys.meta_path.append(_AliasFinder())
