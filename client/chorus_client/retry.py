"""Retries with capped exponential backoff and full jitter, resending identical bytes.

Only failures that may succeed later are retried: timeouts and connection errors, 5xx (except
501) and 429. ``Retry-After`` (seconds) is honoured. Any other 4xx is final. The body is built
once, so a retry can never carry fresh noise (DAP's upload idempotency; Janus
``core/src/retries.rs``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from chorus_client.errors import TransportError
from chorus_client.transport import Response, Transport

__all__ = ["RetryPolicy", "is_retryable", "retry_after", "send_with_retries"]


def is_retryable(status: int) -> bool:
    return status == 429 or (500 <= status <= 599 and status != 501)


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 5
    base_delay: float = 0.5
    max_delay: float = 30.0
    jitter: random.Random = field(default_factory=random.Random, compare=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if not 0 <= self.base_delay <= self.max_delay:
            raise ValueError("need 0 <= base_delay <= max_delay")

    def delay(self, attempt: int) -> float:
        """Full jitter: uniform in [0, min(max_delay, base · 2^attempt)]."""
        return self.jitter.uniform(0, min(self.max_delay, self.base_delay * 2**attempt))


def retry_after(response: Response) -> float | None:
    """The Retry-After header in seconds, if it is a number."""
    value = response.header("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff


def send_with_retries(transport: Transport, method: str, url: str, body: bytes | None,
                      headers: Mapping[str, str], *, timeout: float, policy: RetryPolicy,
                      sleep: Callable[[float], None] = time.sleep,
                      deadline: float | None = None) -> Response:
    """Send until a final answer; raise ``TransportError`` if every attempt failed.

    Returns the last response when it is final (2xx, or a non-retryable status), or the last
    retryable response once the attempts (or the time until ``deadline``, a
    ``time.monotonic()`` value) are used up.
    """
    last_error: TransportError | None = None
    response: Response | None = None
    for attempt in range(policy.max_attempts):
        budget = timeout
        if deadline is not None:
            budget = min(timeout, deadline - time.monotonic())
            if budget <= 0:
                break
        try:
            response = transport.request(method, url, body=body, headers=headers,
                                         timeout=budget)
        except TransportError as error:
            last_error, response = error, None
        else:
            if not is_retryable(response.status):
                return response
        if attempt + 1 == policy.max_attempts:
            break
        wait = policy.delay(attempt)
        if response is not None:
            advised = retry_after(response)
            if advised is not None:
                if advised > policy.max_delay:
                    break  # the server asks for longer than we may wait: give up for now
                wait = max(wait, advised)
        if deadline is not None and time.monotonic() + wait >= deadline:
            break
        sleep(wait)
    if response is not None:
        return response
    raise last_error or TransportError("no attempt was made before the deadline")
