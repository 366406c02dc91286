"""The notification outbox: a receiver that is down gets the notification later, once; a
failing answer is retried with backoff; a redirect is never followed; a notification whose
deliverer died is posted again after its claim runs out; two evaluators of the same windows
decide once."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

import numpy as np
import pytest
from flask import Flask

from chorus_collector.alerts import AlertWork, evaluate_rule
from chorus_collector.alerts.deliver import BACKOFF_FIRST, CLAIM_SECONDS, MAX_ATTEMPTS, backoff
from chorus_collector.design.simulate import simulate
from chorus_collector.estimators import estimator_for
from chorus_collector.storage import Storage, StoredCampaign, open_storage
from chorus_shared.campaign import campaign_from_spec
from helpers.receiver import Receiver, free_port
from helpers.support import NOW, campaign_spec

HOUR = 3600
T0 = int(NOW)


def planted(storage: Storage, stored: StoredCampaign, before: Sequence[float],
            after: Sequence[float], n: int, seed: int) -> None:
    """Simulated k-RR reports of the two hours before T0, folded as the fold stores them."""
    rng = np.random.default_rng(seed)
    mechanism = stored.campaign.mechanism
    estimator = estimator_for(mechanism.name)
    partials = {}
    for time, distribution in ((T0 - 2 * HOUR, before), (T0 - HOUR, after)):
        values = rng.choice(len(distribution), size=n, p=distribution)
        partials[(stored.id, time)] = (n, estimator.map(mechanism, simulate(mechanism, values,
                                                                            rng)))
    assert storage.commit_fold(0, 0, partials, NOW, moves=storage.fold_status().moves)


@pytest.fixture
def setup(app: Flask) -> tuple[Storage, StoredCampaign]:
    storage: Storage = app.extensions["chorus.storage"]
    stored, _ = storage.insert_campaign(campaign_from_spec(campaign_spec(
        "outbox", mechanism="krr", epsilon=2.0)))
    planted(storage, stored, [0.1, 0.3, 0.3, 0.3], [0.3, 0.3, 0.3, 0.1], 5000, seed=3)
    return storage, stored


def _rule(storage: Storage, stored: StoredCampaign, url: str) -> int:
    definition = {"window": HOUR, "values": [], "correction": "bonferroni", "alpha": 0.01,
                  "min_change": 0.0, "resolved": False}
    return storage.insert_alert_rule("outbox-rule", stored.id, definition, url, None, NOW).id


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.stop()


def test_a_receiver_that_is_down_gets_the_notification_later_and_once(
        setup: tuple[Storage, StoredCampaign], receiver: Receiver) -> None:
    storage, stored = setup
    receiver.port = free_port()  # nothing listens there yet
    rule_id = _rule(storage, stored, f"{receiver.url}/hook")
    now = [NOW + 30]
    work = AlertWork(storage, public_url=None, clock=lambda: now[0])
    assert work.after_fold([stored.id]) == 1
    assert work.every_round().failed == 1  # connection refused
    (firing,) = storage.alert_firings(rule_id, 10)
    assert (firing.status, firing.attempts) == ("pending", 1)
    assert firing.next_attempt_at == now[0] + BACKOFF_FIRST
    assert (firing.last_error or "").startswith("no answer")
    receiver.start()
    now[0] += BACKOFF_FIRST - 1  # not yet due: no attempt
    assert work.every_round().delivered == 0 and receiver.received == []
    now[0] += 1
    assert work.every_round().delivered == 1
    now[0] += 10 * HOUR
    assert work.every_round().delivered == 0
    assert len(receiver.received) == 1
    assert receiver.received[0].json()["idempotency_key"] == firing.key
    (firing,) = storage.alert_firings(rule_id, 10)
    assert (firing.status, firing.attempts, firing.last_error) == ("delivered", 2, None)


def test_failing_answers_back_off_and_a_redirect_is_never_followed(
        setup: tuple[Storage, StoredCampaign], receiver: Receiver) -> None:
    storage, stored = setup
    elsewhere = Receiver().start()
    try:
        receiver.statuses = [503, 302]
        receiver.location = f"{elsewhere.url}/stolen"
        receiver.start()
        rule_id = _rule(storage, stored, f"{receiver.url}/hook")
        now = [NOW + 30]
        work = AlertWork(storage, public_url=None, clock=lambda: now[0])
        work.after_fold([stored.id])
        for attempt in (1, 2, 3):
            assert storage.due_alert_firings(now[0], 10), attempt
            work.every_round()
            (firing,) = storage.alert_firings(rule_id, 10)
            if attempt < 3:
                assert firing.next_attempt_at == now[0] + backoff(attempt)
                now[0] = firing.next_attempt_at
        assert firing.status == "delivered" and firing.attempts == 3
        assert elsewhere.received == []  # the 302 was not followed
        keys = {r.json()["idempotency_key"] for r in receiver.received}
        assert len(receiver.received) == 3 and keys == {firing.key}
    finally:
        elsewhere.stop()
    assert [backoff(n) for n in (1, 2, 3)] == [30.0, 60.0, 120.0]
    assert backoff(MAX_ATTEMPTS) == 3600.0


def test_a_notification_is_given_up_after_the_last_attempt(
        setup: tuple[Storage, StoredCampaign]) -> None:
    storage, stored = setup
    rule_id = _rule(storage, stored, "http://127.0.0.1:9/never")
    now = [NOW + 30]
    posts: list[str] = []

    def refuse(url: str, body: bytes, headers: object) -> int:
        posts.append(url)
        return 500

    work = AlertWork(storage, public_url=None, clock=lambda: now[0], post=refuse)
    work.after_fold([stored.id])
    for _ in range(MAX_ATTEMPTS + 3):
        work.every_round()
        now[0] += 2 * HOUR
    (firing,) = storage.alert_firings(rule_id, 10)
    assert (firing.status, firing.attempts, len(posts)) == ("failed", MAX_ATTEMPTS, MAX_ATTEMPTS)


def test_a_claim_keeps_other_deliverers_off_until_it_runs_out(
        setup: tuple[Storage, StoredCampaign]) -> None:
    storage, stored = setup
    _rule(storage, stored, "http://127.0.0.1:9/hook")
    AlertWork(storage, public_url=None, clock=lambda: NOW + 30).after_fold([stored.id])
    (firing,) = storage.due_alert_firings(NOW + 30, 10)
    # A deliverer claimed it and died before recording the outcome.
    assert storage.claim_alert_firing(firing.id, NOW + 30, CLAIM_SECONDS)
    assert not storage.claim_alert_firing(firing.id, NOW + 31, CLAIM_SECONDS)
    assert storage.due_alert_firings(NOW + 30 + CLAIM_SECONDS - 1, 10) == []
    later = NOW + 31 + CLAIM_SECONDS
    assert [f.id for f in storage.due_alert_firings(later, 10)] == [firing.id]
    assert storage.claim_alert_firing(firing.id, later, CLAIM_SECONDS)


def test_two_evaluators_of_the_same_windows_decide_once(
        setup: tuple[Storage, StoredCampaign], database: str) -> None:
    storage, stored = setup
    rule_id = _rule(storage, stored, "http://127.0.0.1:9/hook")
    other = open_storage(database)  # another replica's connection to the database
    try:
        (rule,) = storage.alert_rules([stored.id])
        mine = evaluate_rule(storage, rule, stored, NOW + 30, None)
        theirs = evaluate_rule(other, rule, stored, NOW + 30, None)
        assert mine is not None and theirs is not None and mine.firings and theirs.firings
        assert other.commit_alert_evaluation(theirs)
        assert not storage.commit_alert_evaluation(mine)  # lost: changes nothing
        assert evaluate_rule(storage, rule, stored, NOW + 60, None) is None  # decided
    finally:
        other.close()
    assert [f.key for f in storage.alert_firings(rule_id, 10)] == [theirs.firings[0].key]
    assert set(storage.alert_state(rule_id).active) == set(theirs.raised)


def test_no_log_line_names_more_than_the_webhooks_origin_and_delete_takes_the_outbox(
        setup: tuple[Storage, StoredCampaign], caplog: pytest.LogCaptureFixture) -> None:
    storage, stored = setup
    port = free_port()
    rule_id = _rule(storage, stored, f"http://127.0.0.1:{port}/T0/B0/secretpath?token=abc")
    work = AlertWork(storage, public_url=None, clock=lambda: NOW + 30)
    work.after_fold([stored.id])
    with caplog.at_level(logging.INFO, logger="chorus.alerts"):
        assert work.every_round().failed == 1
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert f"http://127.0.0.1:{port}/…" in logged and "failed" in logged
    assert "secretpath" not in logged and "token" not in logged
    (firing,) = storage.alert_firings(rule_id, 10)
    assert "secretpath" not in (firing.last_error or "")
    assert storage.delete_alert_rule(rule_id)
    assert storage.due_alert_firings(NOW + 10 * HOUR, 10) == []
    assert storage.alert_firings(rule_id, 10) == [] and storage.alert_rules() == []


def test_the_documented_delivery_figures_are_the_codes() -> None:
    """docs/alerts.md: a 5 s connect and 10 s read timeout, a claim of a minute, 30 s then
    doubling up to an hour, 30 attempts (about a day)."""
    from chorus_collector.alerts import deliver

    assert (deliver.CONNECT_TIMEOUT, deliver.READ_TIMEOUT, CLAIM_SECONDS) == (5.0, 10.0, 60.0)
    assert (BACKOFF_FIRST, deliver.BACKOFF_MAX, MAX_ATTEMPTS) == (30.0, 3600.0, 30)
    total = sum(backoff(n) for n in range(1, MAX_ATTEMPTS))
    assert 20 * HOUR < total < 28 * HOUR


def test_the_public_url_setting_must_be_http_or_https() -> None:
    from chorus_collector.settings import SettingsError, resolve_settings

    assert resolve_settings({"PUBLIC_URL": "https://chorus.example.com"}, environ={})[
        "PUBLIC_URL"] == "https://chorus.example.com"
    with pytest.raises(SettingsError, match="PUBLIC_URL"):
        resolve_settings({"PUBLIC_URL": "chorus.example.com"}, environ={})
