"""A second lifetime counter, kept where device backups do not restore it.

The client's state file holds the privacy ledger. A copy of it restored later (a device or
profile backup, an emulator snapshot) brings the ledger back as it was: what was spent since is
forgotten, and the install can spend its lifetime budget again. The client cannot see such a
rollback, so the app, which knows its platform, may keep a second counter somewhere backups
leave alone (Android's ``getNoBackupFilesDir()``, a file marked ``isExcludedFromBackup`` on
iOS, the platform keystore, the app's own server-side account) and pass it as
``Client(spend_counter=...)``. Every report is then also charged there, before it is queued,
and refused once either counter says the lifetime budget is spent.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Protocol, runtime_checkable

__all__ = ["FileSpendCounter", "SpendCounter"]


@runtime_checkable
class SpendCounter(Protocol):
    """ε this install has spent over its life, kept by the app where rollbacks cannot reach.

    ``charge`` must be durable when it returns: a report is queued, and may leave the device,
    only after it. It may raise to refuse the report (nothing is then queued or charged in the
    client's own ledger).
    """

    def spent(self) -> float: ...

    def charge(self, epsilon: float) -> None: ...


class FileSpendCounter:
    """A :class:`SpendCounter` in one small file, replaced atomically and fsynced.

    Put it in a directory that backups skip; in the client's own ``state_dir`` it would be
    restored together with the ledger and protect nothing. A missing file reads as 0 (a new
    install); an unreadable one refuses every report rather than guess.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def spent(self) -> float:
        try:
            text = self.path.read_text(encoding="ascii")
        except FileNotFoundError:
            return 0.0
        value = float(text)
        if not value >= 0:  # NaN or negative: a damaged file must not hand out budget
            raise ValueError(f"{self.path} does not hold a spend count")
        return value

    def charge(self, epsilon: float) -> None:
        with self._lock:
            total = self.spent() + epsilon
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            temporary = self.path.with_name(self.path.name + ".tmp")
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, repr(total).encode("ascii"))
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temporary, self.path)
            if hasattr(os, "O_DIRECTORY"):  # the rename itself must survive a power loss
                directory = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY)
                try:
                    os.fsync(directory)
                finally:
                    os.close(directory)
