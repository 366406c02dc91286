"""What every answer type offers, whatever its kind: the estimators' ``finalize`` returns an
:class:`Answer` (``chorus_collector.kinds`` says which type for which kind)."""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["Answer"]


class Answer(Protocol):
    """An estimate of one window: its n and variance model, its JSON and CSV renderings."""

    @property
    def n(self) -> int: ...

    @property
    def variance_model(self) -> str: ...

    def to_json(self) -> dict[str, Any]: ...

    def to_csv(self) -> str: ...
