"""chorus_client: report values with local differential privacy.

Values are perturbed on the device with the OS CSPRNG; only noisy reports are uploaded.
Depends on requests and mmh3 only: importing it never imports numpy or flask.
"""

from chorus_client.api import CollectorAPI
from chorus_client.client import (
    Client,
    FlushResult,
    Outcome,
    Pin,
    PrivacyBound,
    RollingWindow,
)
from chorus_client.errors import (
    APIError,
    BudgetExceeded,
    CampaignUnavailable,
    ClientError,
    TransportError,
)
from chorus_client.plan import CampaignPlan, PrivacyPlan
from chorus_client.retry import RetryPolicy
from chorus_client.sent_log import SentLog, SentReport
from chorus_client.transport import RequestsTransport, Response, Transport, WSGITransport
from chorus_client.waiting import CampaignWaiting, Waiting
from chorus_shared.errors import ChorusError, ValueDomainError

__all__ = [
    "APIError",
    "BudgetExceeded",
    "CampaignPlan",
    "CampaignUnavailable",
    "CampaignWaiting",
    "ChorusError",
    "Client",
    "ClientError",
    "CollectorAPI",
    "FlushResult",
    "Outcome",
    "Pin",
    "PrivacyBound",
    "PrivacyPlan",
    "RequestsTransport",
    "Response",
    "RetryPolicy",
    "RollingWindow",
    "SentLog",
    "SentReport",
    "Transport",
    "TransportError",
    "ValueDomainError",
    "WSGITransport",
    "Waiting",
]
