"""An optional token-bucket rate limit per client address, in memory.

Addresses are kept only as truncated SHA-256 digests and only while their bucket is in use
(at most ``max_keys``, least recently used first out); they are never logged or stored. Each
worker process limits separately, so the effective limit is rate × workers; put a stricter
limit at the reverse proxy if that matters.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable

__all__ = ["RateLimiter"]


class RateLimiter:
    def __init__(self, rate: float, burst: int, clock: Callable[[], float],
                 max_keys: int = 100_000) -> None:
        self.rate = rate
        self.burst = burst
        self.clock = clock
        self.max_keys = max_keys
        self._buckets: OrderedDict[bytes, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def check(self, address: str) -> float | None:
        """Take one token for ``address``; None if allowed, else seconds until one is free."""
        key = hashlib.sha256(address.encode()).digest()[:16]
        now = self.clock()
        with self._lock:
            tokens, last = self._buckets.pop(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - last) * self.rate)
            allowed = tokens >= 1.0
            if allowed:
                tokens -= 1.0
            self._buckets[key] = (tokens, now)
            while len(self._buckets) > self.max_keys:
                self._buckets.popitem(last=False)
        return None if allowed else (1.0 - tokens) / self.rate
