"""chorus_shared: the protocol the Chorus client and collector agree on.

Campaign configs and their digests, the report wire format, the mechanisms' parameters,
privacy math and randomizers, and hashing. No I/O, no numpy: both sides import it.
"""

from chorus_shared.campaign import Campaign, campaign_from_config, campaign_from_spec
from chorus_shared.domain import Categories, NumericRange, NumericVector, OpenStrings
from chorus_shared.errors import (
    CampaignError,
    ChorusError,
    DigestMismatch,
    PrivacyWarning,
    ValueDomainError,
    WireError,
)
from chorus_shared.mechanisms import REGISTRY, Mechanism
from chorus_shared.wire import Report, new_report_id, parse_report

__all__ = [
    "REGISTRY",
    "Campaign",
    "CampaignError",
    "Categories",
    "ChorusError",
    "DigestMismatch",
    "Mechanism",
    "NumericRange",
    "NumericVector",
    "OpenStrings",
    "PrivacyWarning",
    "Report",
    "ValueDomainError",
    "WireError",
    "campaign_from_config",
    "campaign_from_spec",
    "new_report_id",
    "parse_report",
]
