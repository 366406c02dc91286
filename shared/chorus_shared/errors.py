"""Exceptions shared by the Chorus client and collector.

Every error Chorus raises on purpose derives from :class:`ChorusError`, so a caller can catch
one base class::

    ChorusError
    ├── CampaignError        a campaign definition is invalid or inconsistent
    ├── WireError            a report or message does not follow the wire format
    │   └── DigestMismatch   a report was made for another version of the campaign
    └── ValueDomainError     a value cannot be reported in this campaign's domain

:class:`PrivacyWarning` is a warning, not an error: it is issued when a campaign's ε gives
little protection (ε > 10).
"""

from __future__ import annotations

__all__ = [
    "CampaignError",
    "ChorusError",
    "DigestMismatch",
    "PrivacyWarning",
    "ValueDomainError",
    "WireError",
]


class ChorusError(Exception):
    """Base class of every error Chorus raises on purpose."""


class CampaignError(ChorusError, ValueError):
    """A campaign definition is invalid: bad ε, domain or mechanism parameters."""


class WireError(ChorusError, ValueError):
    """A report or protocol message is malformed or out of range."""


class DigestMismatch(WireError):
    """A report carries the digest of another campaign configuration."""


class ValueDomainError(ChorusError, ValueError):
    """A value is not in the campaign's domain (unknown category, wrong type)."""


class PrivacyWarning(UserWarning):
    """ε is so large that the guarantee protects little (ε > 10)."""
