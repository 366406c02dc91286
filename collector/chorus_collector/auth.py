"""Bearer tokens for admins and analysts.

Tokens are kept only as SHA-256 digests and compared with :func:`hmac.compare_digest`, so the
comparison takes the same time whatever the presented token; they are never logged. Clients
need no token to submit reports.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Literal

from chorus_collector.problems import Problem

__all__ = ["TokenVerifier"]

Role = Literal["admin", "analyst"]


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


class TokenVerifier:
    def __init__(self, admin_token: str | None, analyst_token: str | None) -> None:
        self._admin = _digest(admin_token) if admin_token else None
        self._analyst = _digest(analyst_token) if analyst_token else None

    def __repr__(self) -> str:
        return "TokenVerifier(<hashed tokens>)"

    def check(self, authorization: str | None, role: Role) -> None:
        """Raise a 401 or 403 :class:`Problem` unless the header grants ``role``."""
        challenge = {"WWW-Authenticate": 'Bearer realm="chorus"'}
        if not authorization:
            raise Problem(401, "unauthorized", "Authentication required",
                          f"this endpoint needs an {role} bearer token", headers=challenge)
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Problem(401, "unauthorized", "Authentication required",
                          "use 'Authorization: Bearer <token>'", headers=challenge)
        presented = _digest(token.strip())
        allowed = [self._admin] if role == "admin" else [self._admin, self._analyst]
        # Compare against every configured token, without short-circuiting.
        granted = False
        for expected in allowed:
            if expected is not None:
                granted |= hmac.compare_digest(presented, expected)
        if not granted:
            raise Problem(403, "forbidden", "Forbidden",
                          f"the token does not grant {role} access")
