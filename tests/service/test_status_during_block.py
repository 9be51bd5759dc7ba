"""GetStatus while a stream's block is being learned: no wait for the block, and nothing acknowledged missing.

The block is held open at a known point (inside its lock, before learning) by wrapping the
service's admission replay, so the test needs no timing.
"""

from __future__ import annotations

import dataclasses
import threading

from predictor.service import Service, ServiceConfig
from predictor.service.synthetic import synthetic_records

WAIT_S = 30.0


def warm_service() -> Service:
    """A service that learned 300 records one by one."""
    service = Service(ServiceConfig(snapshot_every_s=0))
    service.open()
    for record in synthetic_records(300, seed=1):
        service.observe(record)
    return service


def held_open_service() -> tuple[Service, threading.Event, threading.Event]:
    """A warm service whose next block of several records stops inside its lock until released."""
    service = warm_service()
    inside, release = threading.Event(), threading.Event()
    replay = service.ingest.replay

    def held(records, *base):
        if len(records) > 1:
            inside.set()
            assert release.wait(WAIT_S)
        return replay(records, *base)

    service.ingest.replay = held
    return service, inside, release


def status_in_thread(service: Service) -> list:
    """GetStatus from another thread, given ``WAIT_S`` to answer; ``[]`` when it did not."""
    out: list = []
    caller = threading.Thread(target=lambda: out.append(service.status()), daemon=True)
    caller.start()
    caller.join(WAIT_S)
    return out


def comparable(status):
    return dataclasses.replace(status, uptime_s=0.0)


def test_status_answers_during_a_block_from_its_start_and_after_it_with_the_block():
    service, inside, release = held_open_service()
    service.observe(synthetic_records(1, seed=2)[0])  # acknowledged just before the block
    before = service.status()
    block = synthetic_records(40, seed=3)
    stream = threading.Thread(target=lambda: service.report_observations([(r, "") for r in block]))
    stream.start()
    try:
        assert inside.wait(WAIT_S)
        during = status_in_thread(service)  # the block holds the lock: answered anyway
        assert during, "GetStatus waited for the block"
        assert comparable(during[0]) == comparable(before)
        assert during[0].observations_learned == 301
    finally:
        release.set()
        stream.join(WAIT_S)
    after = service.status()
    assert after.observations_learned == 301 + len(block)
    assert service.state._status_before_block is None  # only while a block holds the lock


def test_the_admission_slices_during_a_block_are_those_of_its_start_after_it_scored_its_answers():
    """Held after the block's admission-time answers were scored (the admission monitor changed):
    the status still gives the slices as they stood when the block began."""
    service = warm_service()
    admission = service.state.admission
    inside, release = threading.Event(), threading.Event()
    observe_block = admission.observe_block

    def held(learned):
        observe_block(learned)
        if len(learned) > 1:
            inside.set()
            assert release.wait(WAIT_S)

    admission.observe_block = held
    before = service.status()
    assert before.admission, "no admission slices to compare"
    block = synthetic_records(40, seed=3)
    stream = threading.Thread(target=lambda: service.report_observations([(r, "") for r in block]))
    stream.start()
    try:
        assert inside.wait(WAIT_S)
        assert tuple(admission.monitor.slices()) != before.admission  # the block's answers scored
        during = status_in_thread(service)
        assert during and comparable(during[0]) == comparable(before)
    finally:
        release.set()
        stream.join(WAIT_S)
    assert service.status().admission == tuple(admission.monitor.slices()) != before.admission


def test_a_single_record_takes_the_lock_as_before():
    service, inside, release = held_open_service()
    release.set()  # a one-record block is not held (and computes no status)
    service.observe(synthetic_records(1, seed=4)[0])
    assert not inside.is_set()
    assert service.status().observations_learned == 301


def test_status_waits_for_other_holders_of_the_lock():
    service, _, _ = held_open_service()
    acquired = threading.Event()
    done = threading.Event()

    def hold() -> None:
        with service.state.lock:  # e.g. a snapshot: the status must wait, not answer stale
            acquired.set()
            done.wait(WAIT_S)

    holder = threading.Thread(target=hold)
    holder.start()
    assert acquired.wait(WAIT_S)
    out: list = []
    caller = threading.Thread(target=lambda: out.append(service.status()), daemon=True)
    caller.start()
    caller.join(0.2)
    assert caller.is_alive() and not out  # still waiting for the lock
    done.set()
    holder.join(WAIT_S)
    caller.join(WAIT_S)
    assert out and out[0].observations_learned == 300
