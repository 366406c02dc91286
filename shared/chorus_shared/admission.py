"""Admission credentials for the shuffler (docs/shuffler.md, "Admission").

The app's own backend mints one credential per real install with a secret it shares with the
shuffler only, never with the collector; the app passes it to the client as ``ingest_key``,
which sends it as ``Authorization: Bearer <credential>`` with every upload. The shuffler
verifies it and counts *distinct admitted senders* per batch, so a party without credentials
(the collector, say) cannot fill a batch with reports of its own and isolate one person's.

A credential is ``v1.<sender>.<expiry>.<mac>``: ``sender`` 32 random lowercase hex digits (a
pseudonym for the install, 128 bits), ``expiry`` Unix seconds, and ``mac`` the hex
HMAC-SHA256 under the shared secret of ``chorus-admission-v1``, the sender and the expiry.

Pure standard library: an app backend imports it with the base ``chorus-ldp`` package, without
the collector's dependencies.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Sequence

__all__ = ["CONTEXT", "MIN_SECRET_LENGTH", "AdmissionError", "mint_admission_credential",
           "verify_admission_credential"]

#: Domain separation: a MAC made for anything else under the same secret never verifies.
CONTEXT = b"chorus-admission-v1"
#: Shortest secret accepted (characters): 32 hex digits are 128 bits.
MIN_SECRET_LENGTH = 32
DEFAULT_LIFETIME = 30 * 86_400  # seconds; the backend re-issues before it runs out
_FORM = re.compile(r"v1\.([0-9a-f]{32})\.([0-9]{1,12})\.([0-9a-f]{64})")


class AdmissionError(ValueError):
    """A credential that does not admit: ``reason`` is "malformed", "expired" or "invalid"."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _secret_bytes(secret: str | bytes) -> bytes:
    key = secret.encode() if isinstance(secret, str) else secret
    if len(key) < MIN_SECRET_LENGTH:
        raise ValueError(f"an admission secret needs at least {MIN_SECRET_LENGTH} characters "
                         "(e.g. python -c 'import secrets; print(secrets.token_hex(32))')")
    return key


def _mac(key: bytes, sender: str, expiry: int) -> str:
    # Separators make the message unambiguous even if a future version widens the fields.
    message = CONTEXT + b"\0" + sender.encode() + b"\0" + str(expiry).encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def mint_admission_credential(secret: str | bytes, *, lifetime: float = DEFAULT_LIFETIME,
                              sender: str | None = None, now: float | None = None) -> str:
    """A credential for one install, valid for ``lifetime`` seconds (30 days by default).

    Call it in the app's backend, once per real install and only after the backend's own
    check that the install is real (an account, a device attestation) and rate limit: the
    shuffler's guarantee is only as strong as this issuance (docs/shuffler.md). ``sender``
    (32 lowercase hex digits) keeps an install's pseudonym across renewals; by default a
    fresh random one is drawn, which is the more private choice.
    """
    key = _secret_bytes(secret)
    if sender is None:
        sender = secrets.token_hex(16)
    elif not re.fullmatch(r"[0-9a-f]{32}", sender):
        raise ValueError("sender must be 32 lowercase hex digits")
    if not lifetime > 0:
        raise ValueError("lifetime must be positive")
    expiry = int((time.time() if now is None else now) + lifetime)
    return f"v1.{sender}.{expiry}.{_mac(key, sender, expiry)}"


def verify_admission_credential(credential: str, keys: Sequence[str | bytes], *,
                                now: float | None = None) -> str:
    """The sender of a valid, unexpired credential signed with any of ``keys`` (several
    during a rotation); raise :class:`AdmissionError` otherwise.

    Every key is tried, with :func:`hmac.compare_digest`, whatever the outcome of the others,
    so the time taken does not say which key (if any) came close.
    """
    match = _FORM.fullmatch(credential)
    if match is None:
        raise AdmissionError("malformed", "an admission credential has the form "
                             "v1.<32 hex>.<expiry>.<64 hex>")
    sender, expiry_text, presented = match.groups()
    expiry = int(expiry_text)
    valid = False
    for key in keys:
        valid |= hmac.compare_digest(_mac(_secret_bytes(key), sender, expiry), presented)
    if not valid:
        raise AdmissionError("invalid", "the admission credential was not issued with a "
                                        "secret this shuffler knows")
    # Checked after the MAC, so an expiry is reported only for a credential we issued.
    if expiry <= (time.time() if now is None else now):
        raise AdmissionError("expired", "the admission credential has expired; the app must "
                                        "obtain a new one from its backend")
    return sender
