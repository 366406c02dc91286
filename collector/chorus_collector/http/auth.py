"""Bearer tokens: admin, analyst, and the optional ingest key, metrics token and shuffler key.

Tokens are kept only as SHA-256 digests and compared with :func:`hmac.compare_digest`, so the
comparison takes the same time whatever the presented token; they are never logged. Clients
need no token to submit reports unless an ingest key is configured.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Literal

from chorus_collector.problems import Problem

__all__ = ["Role", "TokenVerifier"]

Role = Literal["admin", "analyst", "ingest", "metrics", "shuffler"]
# Which configured tokens grant each role.
GRANTS: dict[Role, tuple[Role, ...]] = {
    "admin": ("admin",),
    "analyst": ("admin", "analyst"),
    "metrics": ("admin", "metrics"),
    "ingest": ("ingest",),
    "shuffler": ("shuffler",),
}
# Roles that are open to anyone while no token of their own is configured.
OPEN_UNLESS_CONFIGURED: tuple[Role, ...] = ("ingest", "metrics")


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


class TokenVerifier:
    def __init__(self, *, admin: str | None, analyst: str | None, ingest: str | None = None,
                 metrics: str | None = None, shuffler: str | None = None) -> None:
        raw: dict[Role, str | None] = {"admin": admin, "analyst": analyst, "ingest": ingest,
                                       "metrics": metrics, "shuffler": shuffler}
        self._digests: dict[Role, bytes] = {r: _digest(t) for r, t in raw.items() if t}

    def __repr__(self) -> str:
        return f"TokenVerifier(roles={sorted(self._digests)}, <hashed>)"

    def role_of(self, token: str) -> Role | None:
        """The dashboard's sign-in: "admin" or "analyst" for a configured token, else None.
        Both digests are compared whatever the token (no early exit)."""
        presented = _digest(token.strip())
        found: Role | None = None
        roles: tuple[Role, ...] = ("analyst", "admin")  # admin last: wins if both are equal
        for role in roles:
            expected = self._digests.get(role)
            if expected is not None and hmac.compare_digest(presented, expected):
                found = role
        return found

    def fingerprint(self, role: Role) -> str:
        """A short fingerprint of the role's configured token, kept in a signed session so
        that changing the token signs its sessions out (a one-way digest of a digest)."""
        digest = self._digests.get(role)
        if digest is None:
            return ""
        return hashlib.sha256(b"chorus-session\0" + digest).hexdigest()[:16]

    def session_key(self) -> bytes | None:
        """A key for signing sessions when none is configured: derived from the configured
        admin and analyst tokens, so every worker agrees on it and changing a token signs
        every session out. None when neither is configured (nobody can sign in)."""
        material = [self._digests[r] for r in ("admin", "analyst") if r in self._digests]
        if not material:
            return None
        return hmac.new(b"chorus-dashboard-session-key", b"".join(material),
                        hashlib.sha256).digest()

    def grants(self, authorization: str | None, role: Role) -> bool:
        """Whether the header carries a configured token for ``role`` (never open)."""
        if role not in self._digests:
            return False
        try:
            self.check(authorization, role)
        except Problem:
            return False
        return True

    def check(self, authorization: str | None, role: Role) -> None:
        """Raise a 401 :class:`Problem` unless the header carries a token this collector knows,
        and a 403 unless that token grants ``role``."""
        if role in OPEN_UNLESS_CONFIGURED and role not in self._digests:
            return
        label = "ingest key" if role == "ingest" else f"{role} bearer token"
        challenge = {"WWW-Authenticate": 'Bearer realm="chorus"'}
        if not authorization:
            raise Problem("unauthorized", f"this endpoint needs the {label}", headers=challenge)
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Problem("unauthorized", "use 'Authorization: Bearer <token>'", headers=challenge)
        presented = _digest(token.strip())
        granted = known = False
        for grantor, expected in self._digests.items():  # every one, no short-circuit
            matches = hmac.compare_digest(presented, expected)
            known |= matches
            granted |= matches and grantor in GRANTS[role]
        if granted:
            return
        # RFC 6750 §3.1: a token that is no token here is invalid_token, answered 401 (check
        # it); a real token of another role is insufficient_scope, answered 403 (use another).
        if not known:
            raise Problem("unauthorized", f"the bearer token presented is not one this collector "
                          f"knows: this endpoint needs the {label}",
                          headers={"WWW-Authenticate": 'Bearer realm="chorus", '
                                                       'error="invalid_token"'})
        raise Problem("forbidden", f"the bearer token presented is valid but does not grant "
                      f"this endpoint: it needs the {label}",
                      headers={"WWW-Authenticate": 'Bearer realm="chorus", '
                                                   'error="insufficient_scope"'})
