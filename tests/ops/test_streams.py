"""ops.streams on the emulator, where each stream is a worker thread: ordering through events
and stream waits, the race check that reports a missing dependency, record_stream, synchronize,
queries, timing, and mpslinalg's kernels running on the current stream.

A "gate" (a callable queued first on a stream that blocks until the test opens it) makes the
stream's work late on purpose, so a wrong order would show in the results, not by luck.
"""

from __future__ import annotations

import doctest
import gc
import importlib
import threading
import weakref

import pytest
import torch
import torch.nn.functional as F

import mpslinalg
from mpslinalg import emulator
from mpslinalg._core import metal as _metal
from mpslinalg._core import metal_params
from mpslinalg.ops import streams

streams_module = importlib.import_module("mpslinalg.ops.streams")
pad_module = importlib.import_module("mpslinalg.ops.padding")
GATE_TIMEOUT_S = 10


@pytest.fixture(autouse=True)
def _metal_on_cpu():
    with mpslinalg.use_backend("metal"):
        yield


def _gate(s: streams.Stream) -> threading.Event:
    """Hold ``s``'s later work until the returned event is set."""
    opened = threading.Event()
    s._queue.submit(lambda: opened.wait(GATE_TIMEOUT_S))
    return opened


def test_default_stream_is_synchronous_and_current():
    default = streams.default_stream("cpu")
    assert streams.current_stream("cpu") == default
    x = torch.arange(3.0)
    emulator.reset_launch_counts()
    y = mpslinalg.ops.pad(x, (1, 0))
    assert torch.equal(y, torch.tensor([0.0, 0.0, 1.0, 2.0]))  # done on return
    assert default.query() and emulator.total_launches() == 1
    event = default.record_event()
    assert event.query()


def test_kernels_run_on_the_current_stream_and_synchronize_waits():
    s = streams.Stream("cpu")
    x = torch.randn(4, 5)
    opened = _gate(s)
    with streams.stream(s):
        assert streams.current_stream("cpu") == s
        y = mpslinalg.ops.pad(x, (1, 1), value=2.0)
        z = mpslinalg.ops.conv1d(x[None], torch.ones(3, 4, 2))
    assert streams.current_stream("cpu") != s
    assert not s.query()  # held by the gate: the launches are queued, not done
    opened.set()
    s.synchronize()
    assert s.query()
    assert torch.equal(y, F.pad(x, (1, 1), value=2.0))
    torch.testing.assert_close(z, F.conv1d(x[None], torch.ones(3, 4, 2)))


def test_an_event_orders_two_streams():
    producer, consumer = streams.Stream("cpu"), streams.Stream("cpu")
    x = torch.randn(3, 4)
    opened = _gate(producer)
    with streams.stream(producer):
        y = mpslinalg.ops.pad(x, (2, 2), value=1.0)
        ready = producer.record_event()
    assert not ready.query()
    consumer.wait_event(ready)
    with streams.stream(consumer):
        z = mpslinalg.ops.pad(y, (0, 0, 1, 1), value=-1.0)
    assert not consumer.query()  # waits for the producer, still gated
    opened.set()
    consumer.synchronize()
    assert ready.query()
    assert torch.equal(z, F.pad(F.pad(x, (2, 2), value=1.0), (0, 0, 1, 1), value=-1.0))


def test_wait_stream_orders_like_an_event():
    first, second = streams.Stream("cpu"), streams.Stream("cpu")
    opened = _gate(first)
    with streams.stream(first):
        y = mpslinalg.ops.pad(torch.ones(2, 2), (1, 1))
    second.wait_stream(first)
    with streams.stream(second):
        z = mpslinalg.ops.pad(y, (1, 1))
    opened.set()
    second.synchronize()
    assert torch.equal(z, F.pad(torch.ones(2, 2), (2, 2)))


def test_a_missing_dependency_is_reported():
    """No event between the producer's write and the consumer's read: a race on a GPU whatever
    the timing, reported when the consumer's launch is submitted."""
    producer, consumer = streams.Stream("cpu"), streams.Stream("cpu")
    opened = _gate(producer)
    with streams.stream(producer):
        y = mpslinalg.ops.pad(torch.ones(2, 2), (1, 1))
    with pytest.raises(streams.StreamRaceError, match="mpslinalg.streams: race .* reads .* "
                                                      "writes"), streams.stream(consumer):
        mpslinalg.ops.pad(y, (1, 1))
    with pytest.raises(streams.StreamRaceError, match="on the default stream"):
        mpslinalg.ops.pad(y, (1, 1))  # the host launch did not synchronize either
    opened.set()
    producer.synchronize()  # now the host knows: both are fine
    with streams.stream(consumer):
        mpslinalg.ops.pad(y, (1, 1))
    consumer.synchronize()
    mpslinalg.ops.pad(y, (1, 1))


def _write_into(out: torch.Tensor, x: torch.Tensor) -> None:
    """Launch the pad kernel with ``out`` as its output (a kernel writing an existing tensor)."""
    kernel = _metal.kernel("ops/padding.metal", "pad", torch.int32, x.device, wide=False)
    params = metal_params.pack("ops/padding.h", "PadParams", **pad_module.fields(
        list(out.shape), list(x.shape), list(x.stride()), [0, 0], (0, 0)))
    _metal.launch(kernel, x.view(torch.int32), out.view(torch.int32), params,
                  threads=out.numel(), group_size=None)


def test_a_write_after_an_unordered_read_is_reported_and_two_readers_are_not():
    reader, writer = streams.Stream("cpu"), streams.Stream("cpu")
    x = torch.randn(5)
    opened = _gate(reader)
    with streams.stream(reader):
        mpslinalg.ops.pad(x, (1, 1))  # reads x
    with streams.stream(writer):
        mpslinalg.ops.pad(x, (2, 2))  # reads x too: no race
        with pytest.raises(streams.StreamRaceError, match="writes an allocation that kernel "
                                                          "'pad_int32_wide0' .* reads"):
            _write_into(x, torch.zeros(5))
    writer.wait_stream(reader)
    with streams.stream(writer):
        _write_into(x, torch.zeros(5))  # ordered now
    opened.set()
    writer.synchronize()
    assert torch.equal(x, torch.zeros(5))


def test_record_stream_keeps_memory_alive_until_the_work_is_done():
    s = streams.Stream("cpu")
    opened = _gate(s)
    x = torch.randn(1000)
    kept = weakref.ref(x.untyped_storage())
    streams.record_stream(x, s)
    control = torch.randn(1000)
    released = weakref.ref(control.untyped_storage())
    del x, control
    gc.collect()
    assert released() is None  # without record_stream the memory goes at once
    assert kept() is not None  # the stream's work is not done
    opened.set()
    s.synchronize()
    gc.collect()
    assert kept() is None


def test_device_synchronize_waits_for_every_stream():
    a, b = streams.Stream("cpu"), streams.Stream("cpu")
    gates = [_gate(a), _gate(b)]
    for s in (a, b):
        with streams.stream(s):
            mpslinalg.ops.pad(torch.ones(3), (1, 1))
    assert not a.query() and not b.query()
    for g in gates:
        g.set()
    streams.synchronize("cpu")
    assert a.query() and b.query()


def test_event_timing_and_synchronize():
    s = streams.Stream("cpu")
    start, end = streams.Event(enable_timing=True), streams.Event(enable_timing=True)
    start.record(s)
    with streams.stream(s):
        mpslinalg.ops.pad(torch.ones(64, 64), (1, 1))
    end.record(s)
    end.synchronize()
    assert end.query() and start.elapsed_time(end) >= 0.0
    with pytest.raises(RuntimeError, match="mpslinalg.Event.elapsed_time: .*enable_timing"):
        streams.Event().elapsed_time(end)
    unrecorded = streams.Event()
    assert unrecorded.query()
    s.wait_event(unrecorded)  # a never-recorded event is no dependency (as CUDA)
    s.synchronize()


def test_errors_on_a_stream_surface_at_synchronize():
    s = streams.Stream("cpu")

    def fail():
        raise ValueError("boom")

    s._queue.submit(fail)
    with pytest.raises(RuntimeError, match="mpslinalg.Stream.synchronize: .*boom"):
        s.synchronize()
    s.synchronize()  # reported once


def test_the_current_stream_is_per_thread():
    s = streams.Stream("cpu")
    seen = []
    with streams.stream(s):
        worker = threading.Thread(target=lambda: seen.append(streams.current_stream("cpu")))
        worker.start()
        worker.join()
        with streams.stream(None):
            assert streams.current_stream("cpu") == s
    assert seen == [streams.default_stream("cpu")]


def test_bad_arguments():
    s = streams.Stream("cpu")
    with pytest.raises(TypeError, match="mpslinalg.Stream.wait_event: expected an Event"):
        s.wait_event(s)
    with pytest.raises(TypeError, match="mpslinalg.record_stream: expected a tensor"):
        streams.record_stream([1], s)
    with pytest.raises(TypeError, match="mpslinalg.stream: expected a Stream"):
        with streams.stream("cpu"):
            pass
    with pytest.raises(ValueError, match="mpslinalg.Stream: streams exist on"):
        streams.Stream("meta")


def test_docstring_examples():
    failures, tried = doctest.testmod(streams_module, raise_on_error=False)
    assert tried and not failures


# ---------------------------------------------------------------- linalg ops on a stream


def test_a_small_path_kernel_runs_on_the_current_stream():
    """The n <= 4 kernel of inv queues behind the stream's earlier work: the gather of its
    non-contiguous input, whose source a gated pad writes."""
    s = streams.Stream("cpu")
    x = torch.randn(6, 3, 3) + 4 * torch.eye(3)
    opened = _gate(s)
    with streams.stream(s):
        padded = mpslinalg.ops.pad(x, (0, 1))  # (6, 3, 4): the matrices are a strided view
        X, info = mpslinalg.inv_ex(padded[..., :3])
    opened.set()
    s.synchronize()
    torch.testing.assert_close(X, torch.linalg.inv(x))
    assert not info.any()


def _open_soon(s: streams.Stream) -> None:
    """Hold ``s``'s later work for a moment, from another thread: a read that did not wait for
    it would find what the stream has not computed yet (the tests load their kernels first, so
    the moment is not spent compiling)."""
    threading.Timer(0.2, _gate(s).set).start()


def test_check_errors_waits_for_the_current_stream():
    """inv's one device read (of info) sees what the stream's kernels wrote, however late."""
    s = streams.Stream("cpu")
    singular = torch.ones(8, 8)  # the general LU path: info starts as zeros
    mpslinalg.inv_ex(singular)
    _open_soon(s)
    with streams.stream(s), pytest.raises(mpslinalg.LinAlgError, match="is zero"):
        mpslinalg.inv(singular)
    with streams.stream(s):
        _, info = mpslinalg.inv_ex(singular)
        _open_soon(s)
        with pytest.raises(mpslinalg.LinAlgError, match=r"mpslinalg.inv: The diagonal"):
            mpslinalg.check_errors(info, "mpslinalg.inv")


def test_a_host_read_of_another_streams_unfinished_work_is_a_race():
    producer = streams.Stream("cpu")
    opened = _gate(producer)
    with streams.stream(producer):
        _, info = mpslinalg.inv_ex(torch.ones(8, 8))
    with pytest.raises(streams.StreamRaceError, match="a host read reads an allocation that "
                                                      "kernel .* writes"):
        mpslinalg.check_errors(info, "mpslinalg.inv")
    opened.set()
    producer.synchronize()
    with pytest.raises(mpslinalg.LinAlgError):
        mpslinalg.check_errors(info, "mpslinalg.inv")


def test_check_offsets_waits_for_the_current_stream():
    """grouped_mm's device read of ``offs`` sees the offsets the stream's pad kernel writes."""
    s = streams.Stream("cpu")
    a, b = torch.randn(5, 3), torch.randn(3, 3, 2)

    def grouped(first_end: int) -> torch.Tensor:
        offs = mpslinalg.ops.pad(torch.tensor([first_end, 5], dtype=torch.int32), (0, 1),
                                 value=5)
        return mpslinalg.ops.grouped_mm(a, b, offs=offs, check_offsets=True)

    grouped(1)  # other offsets: the allocator may give their memory to the ones below
    _open_soon(s)
    with streams.stream(s):
        out = grouped(2)
    s.synchronize()
    expected = torch.cat([a[:2] @ b[0], a[2:5] @ b[1]])
    torch.testing.assert_close(out, expected)
