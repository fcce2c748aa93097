"""The answers every Uplink item kind shares (cloud/api/item_acks.py), through the track events'
EventAcks over a real BatchAcks and real futures: each item gets exactly one ack, a refusal
is counted before it, a bug answers RETRY instead of hanging the batch."""

from __future__ import annotations

from concurrent.futures import Future

from cloud_helpers import track_event
from strata.cloud.api.batch_acks import BatchAcks
from strata.cloud.api.drops import Drops
from strata.cloud.api.track_service import EventAcks
from strata.cloud.metrics import CloudMetrics
from strata.cloud.store.event_store import StoreBusyError, StoredTrack
from strata.shared.contracts import analytics_pb2, events_pb2
from strata.shared.metrics import sample

S = events_pb2
RETRY_MS = 250


def _answers(n: int) -> tuple[EventAcks, BatchAcks, list[analytics_pb2.UplinkResponse]]:
    metrics = CloudMetrics()
    sent: list[analytics_pb2.UplinkResponse] = []
    acks = BatchAcks(0, n, sent.append, lambda: None)
    return EventAcks(Drops(metrics), metrics, RETRY_MS), acks, sent


def _failed(answers: EventAcks, reason: str) -> float:
    labels = {"method": "Uplink", "reason": reason}
    return sample(answers.metrics.registry, "strata_cloud_request_failure_total", labels) or 0


def test_refusals_are_counted_and_acked_invalid_or_retry_with_the_hint() -> None:
    answers, acks, sent = _answers(3)
    evs = [track_event(i) for i in (1, 2, 3)]
    answers.invalid(0, evs[0], acks, "too_long", "too_long: camera_id is long")
    answers.retry(1, evs[1], acks, "held", "held: an earlier event got RETRY")
    answers.retry(2, evs[2], acks, "queue_full", "queue_full: wait", 40)
    (resp,) = sent
    got = [(a.idempotency_key, a.status, a.retry_after_ms) for a in resp.event_acks]
    assert got == [
        (evs[0].idempotency_key, S.TRACK_EVENT_STATUS_INVALID, 0),
        (evs[1].idempotency_key, S.TRACK_EVENT_STATUS_RETRY, RETRY_MS),
        (evs[2].idempotency_key, S.TRACK_EVENT_STATUS_RETRY, 40),
    ]
    assert resp.event_acks[0].reason == "too_long: camera_id is long"
    # INVALID drop codes carry the kind's prefix; RETRY codes are the refuser's own.
    assert _failed(answers, "event_too_long") == 1
    assert _failed(answers, "held") == _failed(answers, "queue_full") == 1


def test_a_step_that_raises_answers_retry_internal_and_a_second_ack_is_ignored() -> None:
    answers, acks, sent = _answers(1)
    ev = track_event(1)

    def bug() -> None:
        raise RuntimeError("boom")

    answers.guarded(0, ev, acks, bug)
    answers.invalid(0, ev, acks, "late", "late: ignored")  # the batch is already answered
    (resp,) = sent
    (ack,) = resp.event_acks
    assert ack.status == S.TRACK_EVENT_STATUS_RETRY and ack.reason == "internal: boom"
    assert ack.retry_after_ms == RETRY_MS and _failed(answers, "internal") == 1


def test_the_store_answer_acks_stored_duplicate_or_retry() -> None:
    answers, acks, sent = _answers(4)
    evs = [track_event(i) for i in (1, 2, 3, 4)]
    futs: list[Future[StoredTrack]] = []

    def submit(_ev: events_pb2.TrackEvent) -> Future[StoredTrack]:
        futs.append(Future())
        return futs[-1]

    def busy(_ev: events_pb2.TrackEvent) -> Future[StoredTrack]:
        raise StoreBusyError("queue full")

    assert answers.submit(0, evs[0], acks, submit)
    assert answers.submit(1, evs[1], acks, submit)
    assert answers.submit(2, evs[2], acks, submit)
    assert not answers.submit(3, evs[3], acks, busy)
    assert sent == []  # three wait for the store
    futs[0].set_result(StoredTrack(S.StoredTrackEvent(stored_id=11), duplicate=False))
    futs[1].set_result(StoredTrack(S.StoredTrackEvent(stored_id=5), duplicate=True))
    futs[2].set_exception(OSError("disk gone"))
    (resp,) = sent
    got = [(a.status, a.stored_id, a.reason) for a in resp.event_acks]
    assert got == [
        (S.TRACK_EVENT_STATUS_STORED, 11, ""),
        (S.TRACK_EVENT_STATUS_DUPLICATE, 5, ""),
        (S.TRACK_EVENT_STATUS_RETRY, 0, "store_error: disk gone"),
        (S.TRACK_EVENT_STATUS_RETRY, 0, "store_busy: queue full"),
    ]
    reg = answers.metrics.registry
    assert sample(reg, "strata_cloud_track_events_stored_total", {"type": "new"}) == 1
    assert sample(reg, "strata_cloud_track_events_duplicate_total", {"type": "new"}) == 1
    assert sample(reg, "strata_cloud_track_events_retry_total", {"type": "new"}) == 2
    assert _failed(answers, "store_error") == _failed(answers, "store_busy") == 1
