"""Delivering alert notifications to webhooks: an outbox, at least once, signed.

Evaluations queue notifications in the database (``alert_firings``) in the transaction that
decides them; every folder's round (each server worker, ``chorus aggregate``) then delivers
the due ones. A deliverer first claims a notification for one attempt (a compare-and-set that
counts the attempt), so two workers never post it at once; a deliverer that dies mid-attempt
leaves a claim that runs out after ``CLAIM_SECONDS``, and the notification is posted again.
So a receiver gets each notification at least once, and tells repeats apart by its
``idempotency_key`` (also the ``Chorus-Idempotency-Key`` header).

Each attempt is one POST of the JSON body with a timeout; a 2xx answer delivers it. Anything
else (no connection, a timeout, a 3xx, a 4xx or 5xx) is retried with exponential backoff, from
``BACKOFF_FIRST`` seconds up to ``BACKOFF_MAX`` between attempts, ``MAX_ATTEMPTS`` times in
all (about a day), then given up ("failed"). Redirects are never followed: a webhook that moved
answers 3xx, and the notification neither goes to the new place nor, on another host, leaks
its signature or contents there.

With a rule's ``secret`` every attempt carries ``Chorus-Signature: t=<unix seconds>,
v1=<hex HMAC-SHA256 of "<t>." + body, keyed by the secret>`` (the timestamp lets a receiver
refuse replays). Neither the URL's path or query nor the secret is ever logged.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from chorus_collector.alerts.rules import webhook_origin
from chorus_collector.storage import AlertFiring, Storage
from chorus_collector.version import VERSION

__all__ = ["BACKOFF_FIRST", "BACKOFF_MAX", "CLAIM_SECONDS", "MAX_ATTEMPTS",
           "SIGNATURE_HEADER", "Deliveries", "Post", "backoff", "deliver_due", "post_webhook",
           "signature"]

log = logging.getLogger("chorus.alerts")

SIGNATURE_HEADER = "Chorus-Signature"
CONNECT_TIMEOUT, READ_TIMEOUT = 5.0, 10.0
CLAIM_SECONDS = 60.0  # longer than an attempt can take (the two timeouts, and then some)
BACKOFF_FIRST, BACKOFF_MAX = 30.0, 3_600.0
MAX_ATTEMPTS = 30  # 30 s, 1, 2, 4 … 32 min, then hourly: about 24 hours in all
BATCH = 20  # notifications a round delivers at most (the rest wait for the next round)

#: Posts ``body`` to a URL with these headers, returns the HTTP status; raises on no answer.
Post = Callable[[str, bytes, Mapping[str, str]], int]


@dataclass(frozen=True)
class Deliveries:
    delivered: int = 0
    failed: int = 0  # attempts that failed (retried later, or given up)


def post_webhook(url: str, body: bytes, headers: Mapping[str, str]) -> int:
    """One POST with connect and read timeouts, never following a redirect."""
    import requests

    response = requests.post(url, data=body, headers=dict(headers),
                             timeout=(CONNECT_TIMEOUT, READ_TIMEOUT), allow_redirects=False)
    response.close()
    return int(response.status_code)


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The ``Chorus-Signature`` header's value for ``body`` sent at ``timestamp``."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={digest.hexdigest()}"


def backoff(attempts: int) -> float:
    """Seconds before the next attempt, after ``attempts`` failed ones."""
    return float(min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** max(0, attempts - 1)))


def deliver_due(storage: Storage, now: float, post: Post = post_webhook,
                limit: int = BATCH) -> Deliveries:
    """Post the notifications due now, each claimed first; their outcomes recorded."""
    due = storage.due_alert_firings(now, limit)
    if not due:
        return Deliveries()
    rules = {rule.id: rule for rule in storage.alert_rules()}
    delivered = failed = 0
    for firing in due:
        rule = rules.get(firing.rule_id)
        if rule is None or not storage.claim_alert_firing(firing.id, now, CLAIM_SECONDS):
            continue  # deleted meanwhile (its notifications with it), or another took it
        error = _attempt(firing, rule.webhook, rule.secret, now, post)
        attempts = firing.attempts + 1
        if error is None:
            storage.finish_alert_firing(firing.id, now, delivered=True, error=None,
                                        retry_at=None)
            delivered += 1
            continue
        failed += 1
        retry_at = now + backoff(attempts) if attempts < MAX_ATTEMPTS else None
        storage.finish_alert_firing(firing.id, now, delivered=False, error=error,
                                    retry_at=retry_at)
        when = "giving up" if retry_at is None else f"retrying in {retry_at - now:.0f} s"
        log.warning("alert %s: delivering %s %s to %s failed (attempt %d: %s); %s", rule.name,
                    firing.event, firing.key, webhook_origin(rule.webhook), attempts, error,
                    when)
    return Deliveries(delivered, failed)


def _attempt(firing: AlertFiring, url: str, secret: str | None, now: float,
             post: Post) -> str | None:
    """One attempt: None if delivered, else why not (never the URL: it may hold a
    credential, and the HTTP library's errors quote it)."""
    body = firing.payload.encode()
    headers = {"Content-Type": "application/json", "User-Agent": f"chorus-collector/{VERSION}",
               "Chorus-Event": firing.event, "Chorus-Idempotency-Key": firing.key}
    if secret is not None:
        headers[SIGNATURE_HEADER] = signature(secret, int(now), body)
    try:
        status = post(url, body, headers)
    except Exception as error:  # no answer: refused, unreachable, timed out, TLS …
        return f"no answer ({type(error).__name__})"
    if 200 <= status < 300:
        return None
    if 300 <= status < 400:
        return f"HTTP {status}: redirects are not followed"
    return f"HTTP {status}"
