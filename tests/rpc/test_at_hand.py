"""``at_hand``: a stream's items in order, in chunks of what has arrived, never waiting past the first."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from predictor.rpc.at_hand import at_hand


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.integers(), st.none()), max_size=300), st.integers(1, 50), st.integers(1, 8))
def test_the_items_come_in_order_in_chunks_of_at_most_most(items, most, ahead):
    chunks = list(at_hand(iter(items), most, ahead))
    assert [x for chunk in chunks for x in chunk] == items
    assert all(1 <= len(chunk) <= most for chunk in chunks)


def test_what_the_source_raises_comes_after_the_items_before_it():
    def source():
        yield from range(5)
        raise KeyError("bad line")

    taken = []
    with pytest.raises(KeyError, match="bad line"):
        for chunk in at_hand(source(), 3):
            taken += chunk
    assert taken == list(range(5))


def test_an_item_is_handed_on_without_waiting_for_the_next():
    go_on = threading.Event()

    def live():
        yield "first"
        go_on.wait(2)  # held back, the first item would come with the second, 2 s on
        yield "second"

    chunks = at_hand(live(), 100)
    assert next(chunks) == ["first"]  # the source is waiting: the first item is not held back
    go_on.set()
    assert next(chunks) == ["second"]


def test_closing_stops_the_reading():
    read = []

    def endless():
        i = 0
        while True:
            read.append(i)
            yield i
            i += 1

    chunks = at_hand(endless(), 2, ahead=4)
    assert next(chunks)[0] == 0
    chunks.close()
    time.sleep(0.3)
    stopped = len(read)
    time.sleep(0.3)
    assert len(read) == stopped <= 16


def test_most_below_one_is_refused():
    with pytest.raises(ValueError, match="most"):
        next(at_hand([1], 0))
