"""The embeddable client over time: budgets, memoization, the durable outbox, the sender."""

from __future__ import annotations

import json
import math
import random
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from chorus_client import BudgetExceeded, Client, Response, RetryPolicy, TransportError
from chorus_shared import campaign_from_spec
from chorus_shared.campaign import canonical_json
from chorus_shared.hashing import bloom_mask
from chorus_shared.mechanisms import Duchi, Rappor
from chorus_shared.rng import DeterministicRandom, derive_key
from support import FakeClock, ScriptedTransport, Sent, timeout_error, z_threshold

BASE = "http://collector.test"


def accepted(call: Sent) -> Response:
    reports = json.loads(call.body or b"{}")["reports"]
    body = {"results": [{"report_id": r["report_id"], "status": "accepted"} for r in reports]}
    return Response(200, json.dumps(body).encode())


def config(mechanism: str = "krr", **privacy: Any) -> dict[str, Any]:
    specs: dict[str, dict[str, Any]] = {
        "krr": {"epsilon": 1.0, "domain": ["a", "b", "c", "d"]},
        "rappor": {"epsilon": None, "domain": {"kind": "strings"},
                   "params": {"k": 16, "h": 2, "m": 4, "f": 0.5, "p": 0.25, "q": 0.75}},
        "duchi": {"epsilon": 1.0, "domain": {"kind": "numeric", "lo": 0, "hi": 10}},
    }
    spec = {"name": "c", "mechanism": mechanism, **specs[mechanism], "privacy": privacy}
    return campaign_from_spec(spec).public_config()


def client(conf: dict[str, Any], state_dir: Path | None = None, transport: Any = None,
           **kwargs: Any) -> Client:
    kwargs.setdefault("budget_cap", math.inf)  # these tests exercise the campaign's budget
    return Client(BASE, state_dir=state_dir,
                  transport=transport or ScriptedTransport([], fallback=accepted),
                  campaign_configs={"c": conf}, sleep=lambda s: None,
                  retry=RetryPolicy(max_attempts=2, base_delay=0), **kwargs)


# -- budget -------------------------------------------------------------------------------------


def test_budget_is_enforced_across_restarts(tmp_path: Path) -> None:
    conf = config(memoize=False, budget=2.0)
    first = client(conf, tmp_path)
    assert [first.report("c", v) for v in "aab"] == ["queued", "queued", "suppressed"]
    assert first.spent() == pytest.approx(2.0)
    assert first.suppressed["budget"] == 1
    del first  # no close(): as if the app were killed
    again = client(conf, tmp_path)
    assert again.report("c", "c") == "suppressed"
    assert again.spent("c") == pytest.approx(2.0)
    assert again.pending() == 2  # the two queued reports survived
    with pytest.raises(BudgetExceeded, match="budget exhausted"):
        client(conf, tmp_path, strict=True).report("c", "d")


def test_the_client_caps_what_a_campaign_may_spend_and_its_epsilon() -> None:
    """The collector states the budget; the client does not have to believe it."""
    greedy = client(config(memoize=False, budget=1000.0), budget_cap=3.0)
    assert [greedy.report("c", "a") for _ in range(5)].count("queued") == 3
    assert greedy.spent() == pytest.approx(3.0)
    loose = campaign_from_spec({"name": "c", "mechanism": "krr", "epsilon": 11.0,
                                "domain": ["a", "b"]}, warn=False).public_config()
    wary = Client(BASE, transport=ScriptedTransport([]), campaign_configs={})
    wary._campaigns.clear()
    with pytest.raises(Exception, match="above this client's limit"):
        wary._adopt("c", loose)


def test_daily_unit_resets_the_budget_each_utc_day() -> None:
    clock = FakeClock(86400 * 20_000 + 3600)
    daily = client(config(memoize=False, unit="day", budget=1.0), clock=clock)
    assert daily.report("c", "a") == "queued"
    assert daily.report("c", "a") == "suppressed"
    clock.now += 86400
    assert daily.report("c", "a") == "queued"
    assert daily.spent() == pytest.approx(2.0)


def test_report_cap_per_period() -> None:
    capped = client(config(max_reports=3))
    assert [capped.report("c", "a") for _ in range(5)].count("queued") == 3
    assert capped.suppressed["max-reports"] == 2


def test_total_budget_across_campaigns() -> None:
    confs = {name: campaign_from_spec({"name": name, "mechanism": "krr", "epsilon": 1.0,
                                       "domain": ["a", "b"], "privacy": {"memoize": False,
                                                                         "budget": 5.0}}
                                      ).public_config() for name in ("one", "two")}
    limited = Client(BASE, transport=ScriptedTransport([]), campaign_configs=confs,
                     total_budget=3.0)
    outcomes = [limited.report(name, "a") for name in ("one", "two", "one", "two")]
    assert outcomes == ["queued", "queued", "queued", "suppressed"]
    assert limited.suppressed["total-budget"] == 1
    assert limited.spent() == pytest.approx(3.0)


# -- memoization --------------------------------------------------------------------------------


def _payloads(sdk: Client) -> list[Any]:
    return [json.loads(report)["payload"] for _, report in sdk._state.outbox(10_000)]


def test_memoized_responses_are_stable_across_restarts_and_cost_once(tmp_path: Path) -> None:
    conf = config()  # memoize on, budget ε = 1: one distinct value
    first = client(conf, tmp_path, transport=ScriptedTransport([timeout_error()] * 100))
    for _ in range(20):
        assert first.report("c", "b") == "queued"
    assert len(set(_payloads(first))) == 1
    assert first.spent() == pytest.approx(1.0)
    assert first.report("c", "c") == "suppressed"  # a new value needs new budget
    del first  # unsent: the collector was down
    again = client(conf, tmp_path)
    again.report("c", "b")
    payloads = _payloads(again)
    assert len(payloads) == 21  # the first run's 20 were never sent: still in the outbox
    assert len(set(payloads)) == 1  # the same permanent response after the restart
    assert again.spent() == pytest.approx(1.0)


def test_one_user_reporting_a_thousand_times_does_not_reveal_the_value() -> None:
    """Without memoization a majority vote over many reports recovers the true value; with it,
    the reports repeat one permanent response, right only with probability p."""
    conf = config(budget=1.0)
    users, reports = 400, 60
    right_memo = right_fresh = 0
    for _ in range(users):
        memo = client(conf)
        fresh = client(config(memoize=False, budget=100.0, max_reports=1000))
        for _ in range(reports):
            memo.report("c", "a")
            fresh.report("c", "a")
        right_memo += Counter(_payloads(memo)).most_common(1)[0][0] == 0
        right_fresh += Counter(_payloads(fresh)).most_common(1)[0][0] == 0
        assert memo.spent() <= 1.0 + 1e-12
    p = math.e / (math.e + 3)
    z = (right_memo - users * p) / math.sqrt(users * p * (1 - p))
    assert abs(z) < z_threshold(1e-6)
    # The control: with fresh noise the majority of 60 reports is right with probability
    # 0.997 (p = 0.475 against 0.175 for each other value), so at least 97% of users.
    assert right_fresh > 0.97 * users

    # And one user, a thousand times: one response, one ε.
    single = client(conf)
    for _ in range(1000):
        single.report("c", "a")
    assert len(set(_payloads(single))) == 1
    assert single.spent() == pytest.approx(1.0)


def test_rappor_reports_converge_to_the_prr_not_to_the_true_bloom_filter() -> None:
    """RAPPOR's guarantee: averaging one user's reports recovers the permanent response, in
    which each Bloom bit was replaced by a coin with probability f, never the filter itself."""
    conf = config("rappor")
    mechanism = campaign_from_spec(conf).mechanism
    assert isinstance(mechanism, Rappor)
    users, reports, mismatched = 150, 200, 0
    for _ in range(users):
        sdk = client(conf)
        for _ in range(reports):
            sdk.report("c", "secret-value")
        rows = [json.loads(r) for _, r in sdk._state.outbox(10_000)]
        assert len(rows) == reports
        assert sdk.spent() <= mechanism.epsilon_longitudinal + 1e-9
        cohort = rows[0]["payload"]["cohort"]
        assert {r["payload"]["cohort"] for r in rows} == {cohort}
        ones = Counter()
        for row in rows:
            bits = int(row["payload"]["bits"], 16)
            ones.update(i for i in range(mechanism.k) if (bits >> i) & 1)
        recovered = sum(1 << i for i in range(mechanism.k) if ones[i] > reports / 2)
        bloom = bloom_mask("secret-value", cohort, mechanism.k, mechanism.h)
        mismatched += bin(recovered ^ bloom).count("1")
    # Each bit of the PRR differs from the Bloom bit with probability f/2.
    trials, rate = users * mechanism.k, mechanism.f / 2
    z = (mismatched - trials * rate) / math.sqrt(trials * rate * (1 - rate))
    assert abs(z) < z_threshold(1e-6)


def test_rappor_cumulative_charge_stops_at_the_longitudinal_bound() -> None:
    conf = config("rappor")
    mechanism = campaign_from_spec(conf).mechanism
    sdk = client(conf)
    charged = []
    for _ in range(10):
        before = sdk.spent()
        sdk.report("c", "x")
        charged.append(sdk.spent() - before)
    assert charged[0] == pytest.approx(mechanism.epsilon)
    assert sum(charged) == pytest.approx(mechanism.epsilon_longitudinal)
    assert charged[-1] == 0


def test_alpha_point_rounding_is_unbiased_and_memoized() -> None:
    mechanism = campaign_from_spec({"name": "x", "mechanism": "duchi", "epsilon": 1.0,
                                    "domain": {"kind": "numeric", "lo": 0, "hi": 1},
                                    "params": {"buckets": 8}}).mechanism
    assert isinstance(mechanism, Duchi)
    rng = random.Random(4)
    for t in (-1.0, -0.93, 0.0, 0.3141, 0.99, 1.0):
        rounded = [mechanism.memo_input(t, mechanism.assign(rng)) for _ in range(20_000)]
        width = 2 / 8
        assert all(abs(r - t) <= width + 1e-12 for r in rounded)
        assert all(abs((r + 1) / width - round((r + 1) / width)) < 1e-9 for r in rounded)
        spread = math.sqrt(max(sum((r - t) ** 2 for r in rounded) / len(rounded), 1e-30))
        z = (sum(rounded) / len(rounded) - t) / (spread / math.sqrt(len(rounded)))
        assert abs(z) < z_threshold(1e-6)
    one_install = mechanism.assign(rng)
    assert mechanism.memo_input(0.30, one_install) == mechanism.memo_input(0.31, one_install) \
        or abs(mechanism.memo_input(0.30, one_install) - mechanism.memo_input(0.31,
                                                                              one_install)) \
        == pytest.approx(2 / 8)


def test_deterministic_random_is_keyed() -> None:
    a, b, c = DeterministicRandom(b"k1"), DeterministicRandom(b"k1"), DeterministicRandom(b"k2")
    draws = [a.random() for _ in range(5)]
    assert draws == [b.random() for _ in range(5)]
    assert draws != [c.random() for _ in range(5)]
    assert all(0 <= d < 1 for d in draws)
    assert a.randrange(10) in range(10)
    assert a.getrandbits(300) < 2**300


# -- durable outbox -----------------------------------------------------------------------------


def test_outbox_resends_identical_bytes_after_a_crash(tmp_path: Path) -> None:
    conf = config(memoize=False, budget=100.0)
    down = ScriptedTransport([timeout_error()] * 100)
    first = client(conf, tmp_path, transport=down)
    for value in "abcdabcd":
        first.report("c", value)
    assert first.flush().pending == 8
    attempted = json.loads(down.sent[0].body or b"")["reports"]
    del first  # crash: no close, no flush
    up = ScriptedTransport([], fallback=accepted)
    second = client(conf, tmp_path, transport=up)
    result = second.flush()
    assert (result.accepted, result.pending) == (8, 0)
    resent = json.loads(up.sent[0].body or b"")["reports"]
    assert [json.dumps(r, separators=(",", ":")) for r in resent] == \
        [json.dumps(r, separators=(",", ":")) for r in attempted]
    assert up.sent[0].body == down.sent[0].body  # byte for byte
    assert client(conf, tmp_path, transport=up).pending() == 0


def test_a_permanent_refusal_is_dropped_not_retried_forever(tmp_path: Path) -> None:
    problem = json.dumps({"type": "x/digest-mismatch", "title": "t", "status": 400}).encode()
    refusing = ScriptedTransport([Response(400, problem)])
    sdk = client(config(memoize=False, budget=10.0), tmp_path, transport=refusing)
    sdk.report("c", "a")
    assert sdk.flush().rejected == 1
    assert sdk.pending() == 0
    assert sdk.dropped == 1


# -- sending ------------------------------------------------------------------------------------


def _wait_until(condition: Any, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return False


def test_background_sender_sends_full_batches() -> None:
    transport = ScriptedTransport([], fallback=accepted)
    sdk = client(config(memoize=False, budget=100.0), transport=transport, background=True,
                 batch_size=5, max_batch_age=3600)
    for _ in range(5):
        sdk.report("c", "a")
    assert _wait_until(lambda: sdk.pending() == 0)
    assert len(transport.sent) == 1
    sdk.close()


def test_background_sender_sends_old_reports_even_when_the_batch_is_not_full() -> None:
    transport = ScriptedTransport([], fallback=accepted)
    sdk = client(config(memoize=False, budget=100.0), transport=transport, background=True,
                 batch_size=100, max_batch_age=0.05)
    sdk.report("c", "a")
    assert _wait_until(lambda: sdk.pending() == 0)
    sdk.close()


def test_close_keeps_unsent_reports_for_the_next_run(tmp_path: Path) -> None:
    down = ScriptedTransport([timeout_error()] * 100)
    sdk = client(config(memoize=False, budget=10.0), tmp_path, transport=down)
    sdk.report("c", "a")
    result = sdk.close(timeout=1.0)
    assert result.pending == 1
    assert client(config(memoize=False, budget=10.0), tmp_path).pending() == 1


def test_many_threads_report_at_once_with_a_persistent_state(tmp_path: Path) -> None:
    transport = ScriptedTransport([], fallback=accepted)
    sdk = client(config(memoize=False, budget=10_000.0, max_reports=10_000), tmp_path,
                 transport=transport, batch_size=50)

    def work() -> None:
        for i in range(100):
            sdk.report("c", "abcd"[i % 4])

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sdk.flush().accepted == 800
    ids = [r["report_id"] for s in transport.sent for r in json.loads(s.body or b"")["reports"]]
    assert len(ids) == len(set(ids)) == 800
    assert sdk.spent() == pytest.approx(800.0)


class SlowDownTransport:
    """Every request takes (most of) its timeout and then fails: a collector that hangs."""

    def __init__(self) -> None:
        self.calls = 0

    def request(self, method: str, url: str, *, body: bytes | None, headers: Any,
                timeout: float) -> Response:
        self.calls += 1
        time.sleep(min(timeout, 0.3))
        raise TransportError("timed out")


def test_close_is_bounded_while_the_sender_retries() -> None:
    sdk = Client(BASE, transport=SlowDownTransport(), background=True, batch_size=1,
                 timeout=0.3, campaign_configs={"c": config(memoize=False, budget=10.0)},
                 retry=RetryPolicy(max_attempts=10, base_delay=2.0, max_delay=5.0))
    sdk.report("c", "a")
    time.sleep(0.2)  # let the sender start its retry loop
    started = time.monotonic()
    result = sdk.close(timeout=1.0)
    # Without the bound this took ten attempts with multi-second waits in between.
    assert time.monotonic() - started < 4.0
    assert result.pending == 1


class FlakyTransport:
    def __init__(self) -> None:
        self.calls = 0

    def request(self, method: str, url: str, *, body: bytes | None, headers: Any,
                timeout: float) -> Response:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("a bug in a custom transport")
        return accepted(Sent(method, url, body, dict(headers)))


def test_background_sender_survives_an_unexpected_error() -> None:
    transport = FlakyTransport()
    clock = FakeClock(time.time())
    sdk = Client(BASE, transport=transport, background=True, batch_size=1, clock=clock,
                 campaign_configs={"c": config(memoize=False, budget=10.0)},
                 retry=RetryPolicy(max_attempts=1, base_delay=0.0, max_delay=0.0))
    sdk.report("c", "a")
    assert _wait_until(lambda: transport.calls >= 1)
    clock.now += 120  # past the hold-off after the error
    sdk._wake.set()
    assert _wait_until(lambda: sdk.pending() == 0)
    assert sdk._sender is not None
    assert sdk._sender.is_alive()
    sdk.close()


def test_alpha_rounding_gives_one_float_per_grid_point() -> None:
    """Rounding up from one cell and down from the next must memoize one grid point."""
    for buckets in range(1, 200):
        mechanism = campaign_from_spec({"name": "x", "mechanism": "duchi", "epsilon": 1.0,
                                        "domain": {"kind": "numeric", "lo": 0, "hi": 1},
                                        "params": {"buckets": buckets}}).mechanism
        width = 2 / buckets
        for cell in range(buckets - 1):
            boundary = -1 + (cell + 1) * width
            up = mechanism.memo_input(boundary - width / 4, {"alpha": 0})
            down = mechanism.memo_input(boundary + width / 4, {"alpha": 2**53 - 1})
            assert up == down, (buckets, cell, up, down)


def test_one_rappor_user_reporting_a_thousand_times_reveals_only_the_prr(
        tmp_path: Path) -> None:
    """The averaged reports converge to the permanent response, which differs from the Bloom
    filter; the cohort and the PRR are the same after a restart."""
    conf = config("rappor", budget=100.0, max_reports=5000)
    mechanism = campaign_from_spec(conf).mechanism
    assert isinstance(mechanism, Rappor)
    down = ScriptedTransport([timeout_error()] * 10)
    first = client(conf, tmp_path, transport=down)
    for _ in range(500):
        first.report("c", "my-secret-homepage")
    del first
    again = client(conf, tmp_path, transport=down)
    for _ in range(500):
        again.report("c", "my-secret-homepage")
    rows = [json.loads(r) for _, r in again._state.outbox(10_000)]
    assert len(rows) == 1000
    cohorts = {r["payload"]["cohort"] for r in rows}
    assert len(cohorts) == 1
    cohort = cohorts.pop()
    ones = [0] * mechanism.k
    for row in rows:
        bits = int(row["payload"]["bits"], 16)
        for i in range(mechanism.k):
            ones[i] += (bits >> i) & 1
    recovered = sum(1 << i for i in range(mechanism.k) if ones[i] > 500)
    # What 1000 reports reveal is the PRR (the same bits in both runs), which keeps each Bloom
    # bit only with probability 1 − f/2; across users it differs from the filter in f/2 of
    # the bits (test_rappor_reports_converge_to_the_prr_not_to_the_true_bloom_filter).
    digest = campaign_from_spec(conf).digest
    key = derive_key(again._state.secret, "permanent", digest,
                     canonical_json("my-secret-homepage"))
    prr = mechanism.permanent("my-secret-homepage", DeterministicRandom(key),
                              {"cohort": cohort})
    assert recovered == int(prr["bits"], 16)
    assert again.spent() == pytest.approx(mechanism.epsilon_longitudinal)
