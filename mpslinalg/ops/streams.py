"""Streams and events, one device-generic API with the method names of ``torch.cuda.Stream`` /
``torch.cuda.Event``.

What a stream is depends on the device:

- CUDA: the wrappers hold ``torch.cuda.Stream`` / ``torch.cuda.Event`` and forward every call.
- MPS: torch 2.13 has no ``torch.mps.Stream``; all MPS work, torch's and mpslinalg's kernels
  alike, runs on torch's one MPS command queue. Every `Stream` on MPS stands for that
  queue, so work is ordered as submitted (correct, never concurrent); events are
  ``torch.mps.Event``; `record_stream` has nothing to tell the allocator and does nothing.
- CPU (the Metal emulator): each `Stream` is a real asynchronous queue, a worker thread
  that runs mpslinalg's kernel launches in submission order, so ordering, events and waits
  behave as on a GPU and can be tested here. The default stream is synchronous: launches on it
  run in the calling thread. Only mpslinalg's kernel launches are queued; torch's own CPU
  operations run at once on the host, so read a stream's results after synchronising with it
  (`Stream.synchronize`, `Event.synchronize`, `synchronize`). mpslinalg's own device reads
  (``check_errors``...) wait for the current stream first, as on a GPU.

On the emulator, every launch is checked for a missing dependency: a kernel that reads or
writes an allocation another stream's kernel writes (or writes one it reads), with no event,
stream wait or host synchronisation ordering the two, raises `StreamRaceError` when it is
submitted, whatever the timing, as a happens-before race detector (vector clocks). Allocations
are compared whole: two streams writing disjoint halves of one tensor count as a race.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch

from .._core import metal as _metal

__all__ = ["Event", "Stream", "StreamRaceError", "current_stream", "default_stream",
           "record_stream", "stream", "synchronize"]


class StreamRaceError(RuntimeError):
    """Two kernels on different emulator streams touch one allocation, at least one writing,
    with nothing ordering them."""


# ---------------------------------------------------------------- devices


def _device(device: Any, fn: str) -> torch.device:
    """``device`` as a torch.device; None is the current accelerator (CUDA or MPS), else the
    CPU (the emulator)."""
    if device is None:
        accelerator = getattr(torch, "accelerator", None)
        current = accelerator.current_accelerator() if accelerator is not None and \
            accelerator.is_available() else None
        device = current if current is not None else torch.device("cpu")
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ValueError(f"mpslinalg.{fn}: not a device: {device!r} ({error})") from None
    if device.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"mpslinalg.{fn}: streams exist on cuda, mps and cpu (the emulator), "
                         f"got {device.type!r}")
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


# ---------------------------------------------------------------- the emulator's queues

_queue_ids = itertools.count(1)
#: Clock entry of the host (the synchronous default stream): its accesses happen before
#: everything submitted after them.
_HOST = 0


class _Queue:
    """One emulator stream: a worker thread running submitted callables in order."""

    def __init__(self) -> None:
        self.id = next(_queue_ids)
        self.cond = threading.Condition()
        self.items: collections.deque = collections.deque()
        self.submitted = 0
        self.completed = 0
        self.error: BaseException | None = None
        #: happens-before: queue id -> the last item of that queue complete before the next
        #: item of this one starts
        self.clock: dict[int, int] = {}
        self.closed = False
        self.thread = threading.Thread(target=self._run, name=f"mpslinalg-stream-{self.id}",
                                       daemon=True)
        self.thread.start()

    def submit(self, fn: Callable[[], Any]) -> int:
        with self.cond:
            self.submitted += 1
            self.items.append((self.submitted, fn))
            self.cond.notify_all()
            return self.submitted

    def _run(self) -> None:
        while True:
            with self.cond:
                while not self.items and not self.closed:
                    self.cond.wait()
                if not self.items:
                    return
                seq, fn = self.items.popleft()
            try:
                fn()
            except BaseException as error:  # reported by the next synchronisation
                with self.cond:
                    self.error = self.error or error
            fn = None  # drop the work's references (record_stream) before completing it
            with self.cond:
                self.completed = seq
                self.cond.notify_all()

    def wait_for(self, seq: int) -> None:
        with self.cond:
            while self.completed < seq:
                self.cond.wait()

    def done(self, seq: int) -> bool:
        return self.completed >= seq

    def raise_error(self, fn: str) -> None:
        with self.cond:
            error, self.error = self.error, None
        if error is not None:
            raise RuntimeError(f"mpslinalg.{fn}: work on an emulator stream failed: "
                               f"{error}") from error

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()


class _Tracker:
    """Vector clocks of the host and the queues, and the last accesses to each allocation."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.host_clock: dict[int, int] = {}
        #: allocation (untyped storage) -> [last write (queue id, item, kernel), reads]
        self.accesses: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def host_knows(self, clock: dict[int, int]) -> None:
        with self.lock:
            _merge(self.host_clock, clock)

    def check(self, me: int, seq: int, clock: dict[int, int], name: str,
              touched: list[tuple[Any, bool]], who: str) -> None:
        """Raise StreamRaceError if an access of ``touched`` by ``who`` (kernel ``name``, item
        ``seq`` of queue ``me`` with happens-before ``clock``) is unordered with an earlier
        one; else record them."""
        def ordered(access) -> bool:
            qid, item, _ = access
            return qid in (me, _HOST) or clock.get(qid, 0) >= item

        for storage, writes in touched:
            record = self.accesses.get(storage)
            if record is None:
                record = self.accesses[storage] = [None, []]
            last_write, reads = record
            earlier = ([last_write] if last_write else []) + (reads if writes else [])
            for access in earlier:
                if not ordered(access):
                    theirs = "writes" if access is last_write else "reads"
                    ours = "writes" if writes else "reads"
                    raise StreamRaceError(
                        f"mpslinalg.streams: race on the emulator: {who} "
                        f"{ours} an allocation that kernel {access[2]!r} on emulator stream "
                        f"{access[0]} {theirs} (its item {access[1]}), and nothing orders the "
                        "two; record an Event after the first and wait for it "
                        "(Stream.wait_event / wait_stream), or synchronize")
        for storage, writes in touched:
            record = self.accesses[storage]
            if writes:
                record[0], record[1] = (me, seq, name), []
            else:
                record[1] = [a for a in record[1] if a[0] != me] + [(me, seq, name)]


def _merge(into: dict[int, int], other: dict[int, int]) -> None:
    for key, value in other.items():
        if value > into.get(key, 0):
            into[key] = value


_tracker = _Tracker()
_local = threading.local()
#: Every live emulator queue (for `synchronize`).
_QUEUES: weakref.WeakSet = weakref.WeakSet()


def _touched(kernel: Any, args: tuple) -> list[tuple[Any, bool]]:
    """(allocation, written) for each tensor argument of a launch; a kernel that does not say
    which buffers it writes is taken to write all of them."""
    written = getattr(kernel, "written_buffers", None)
    return [(a.untyped_storage(), written is None or i in written)
            for i, a in enumerate(args) if isinstance(a, torch.Tensor)]


def _submit_launch(kernel: Any, args: tuple, kwargs: dict) -> None:
    """The launch hook of mpslinalg._core.metal while emulator streams exist: the launch goes to
    the thread's current CPU stream, checked for races first."""
    current = _current_cpu()
    name = getattr(kernel, "name", repr(kernel))
    touched = _touched(kernel, args)
    if current._queue is None:  # the synchronous default stream: run it here and now
        with _tracker.lock:
            _tracker.check(_HOST, 0, _tracker.host_clock, name, touched,
                           f"kernel {name!r} on the default stream")
        kernel(*args, **kwargs)
        return
    queue = current._queue
    with _tracker.lock, queue.cond:
        _merge(queue.clock, _tracker.host_clock)
        seq = queue.submitted + 1
        _tracker.check(queue.id, seq, queue.clock, name, touched,
                       f"kernel {name!r} on emulator stream {queue.id}")
        queue.submit(lambda: kernel(*args, **kwargs))


def _wait_for_host_read(x: torch.Tensor) -> None:
    """The host-read hook of mpslinalg._core.metal while emulator streams exist: the host reads
    ``x`` once the thread's current stream has run what was queued on it (as a GPU's
    device-to-host copy on its current stream), checked for races with other streams' work."""
    current = _current_cpu()
    if current._queue is not None:
        current.synchronize()
    with _tracker.lock:
        _tracker.check(_HOST, 0, _tracker.host_clock, "a host read",
                       [(x.untyped_storage(), False)], "a host read")


def _cpu_streams_in_use() -> None:
    _metal.set_stream_hooks(submit=_submit_launch, wait_for_host_read=_wait_for_host_read)


# ---------------------------------------------------------------- Stream and Event


class Stream:
    """A queue of work on one device, like ``torch.cuda.Stream``.

    Parameters
    ----------
    device : torch.device, str or int, optional
        ``"cuda[:i]"``, ``"mps"`` or ``"cpu"`` (the emulator); None: the current accelerator,
        else the CPU.
    priority : int, optional
        CUDA stream priority (ignored elsewhere).

    Examples
    --------
    >>> import torch, mpslinalg
    >>> from mpslinalg.ops import streams
    >>> s = streams.Stream("cpu")
    >>> x = torch.arange(4.)
    >>> with mpslinalg.use_backend("metal"), streams.stream(s):
    ...     y = mpslinalg.ops.pad(x, (1, 1))   # queued on s
    >>> s.synchronize()
    >>> y
    tensor([0., 0., 1., 2., 3., 0.])
    """

    def __init__(self, device: Any = None, priority: int = 0, *, _wrap: Any = None,
                 _default: bool = False) -> None:
        self.device = _device(device, "Stream")
        self.priority = priority
        self._queue: _Queue | None = None
        self._cuda = None
        if self.device.type == "cuda":
            self._cuda = _wrap if _wrap is not None else torch.cuda.Stream(
                self.device, priority=priority)
        elif self.device.type == "cpu" and not _default:
            self._queue = _Queue()
            _QUEUES.add(self._queue)
            weakref.finalize(self, self._queue.close)
            _cpu_streams_in_use()

    # -- torch.cuda.Stream's methods

    def query(self) -> bool:
        """True when all work submitted to the stream is complete."""
        if self._cuda is not None:
            return self._cuda.query()
        if self.device.type == "mps":
            return self.record_event().query()
        if self._queue is None:
            return True
        seq = self._queue.submitted
        if self._queue.done(seq):
            _tracker.host_knows({**self._queue.clock, self._queue.id: seq})
            return True
        return False

    def synchronize(self) -> None:
        """Wait until all work submitted to the stream is complete."""
        if self._cuda is not None:
            self._cuda.synchronize()
        elif self.device.type == "mps":
            torch.mps.synchronize()
        elif self._queue is not None:
            seq = self._queue.submitted
            self._queue.wait_for(seq)
            _tracker.host_knows({**self._queue.clock, self._queue.id: seq})
            self._queue.raise_error("Stream.synchronize")

    def wait_event(self, event: Event) -> None:
        """Make later work on this stream wait for ``event`` (a no-op if it was never
        recorded)."""
        _check_event("Stream.wait_event", event)
        event._wait_on(self)

    def wait_stream(self, stream: Stream) -> None:
        """Make later work on this stream wait for the work submitted to ``stream`` so far."""
        if not isinstance(stream, Stream):
            raise TypeError(f"mpslinalg.Stream.wait_stream: expected a Stream, got "
                            f"{type(stream).__name__}")
        self.wait_event(stream.record_event())

    def record_event(self, event: Event | None = None) -> Event:
        """Record ``event`` (a new one when None) on this stream and return it."""
        event = Event() if event is None else event
        event.record(self)
        return event

    # -- identity

    def _key(self) -> Any:
        if self._cuda is not None:
            return ("cuda", self._cuda.cuda_stream)
        if self._queue is not None:
            return ("cpu", self._queue.id)
        return (self.device.type, "default")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        if self._cuda is not None:
            return f"<mpslinalg Stream {self._cuda!r}>"
        if self._queue is not None:
            return f"<mpslinalg Stream: emulator queue {self._queue.id}>"
        return f"<mpslinalg Stream: the default {self.device.type} stream>"


def _check_event(fn: str, event: object) -> None:
    if not isinstance(event, Event):
        raise TypeError(f"mpslinalg.{fn}: expected an Event, got {type(event).__name__}")


class Event:
    """A point in a stream's work, like ``torch.cuda.Event``.

    Parameters
    ----------
    enable_timing : bool, optional
        Record the time the event completes (for `elapsed_time`).
    blocking, interprocess : bool, optional
        Accepted for ``torch.cuda.Event`` compatibility, passed to it on CUDA.

    Examples
    --------
    >>> import torch, mpslinalg
    >>> from mpslinalg.ops import streams
    >>> producer, consumer = streams.Stream("cpu"), streams.Stream("cpu")
    >>> x = torch.ones(2, 2)
    >>> with mpslinalg.use_backend("metal"):
    ...     with streams.stream(producer):
    ...         y = mpslinalg.ops.pad(x, (1, 0))
    ...         ready = producer.record_event()
    ...     consumer.wait_event(ready)
    ...     with streams.stream(consumer):
    ...         z = mpslinalg.ops.pad(y, (0, 0, 1, 0))
    >>> consumer.synchronize()
    >>> z
    tensor([[0., 0., 0.],
            [0., 1., 1.],
            [0., 1., 1.]])
    """

    def __init__(self, enable_timing: bool = False, blocking: bool = False,
                 interprocess: bool = False) -> None:
        self.enable_timing = enable_timing
        self.blocking = blocking
        self.interprocess = interprocess
        self._device: torch.device | None = None
        self._native = None  # torch.cuda.Event / torch.mps.Event
        self._queue: _Queue | None = None
        self._seq = 0
        self._clock: dict[int, int] = {}
        self._time: float | None = None

    def record(self, stream: Stream | None = None) -> None:
        """Record the event on ``stream`` (the current stream of the current device when
        None): it completes when the work submitted to the stream so far has."""
        if stream is None:
            stream = current_stream()
        elif not isinstance(stream, Stream):
            raise TypeError(f"mpslinalg.Event.record: expected a Stream, got "
                            f"{type(stream).__name__}")
        self._device = stream.device
        if stream._cuda is not None:
            if self._native is None:
                self._native = torch.cuda.Event(self.enable_timing, self.blocking,
                                                self.interprocess)
            self._native.record(stream._cuda)
        elif stream.device.type == "mps":
            if self._native is None:
                self._native = torch.mps.Event(enable_timing=self.enable_timing)
            self._native.record()
        elif stream._queue is None:  # the synchronous default stream: complete now
            self._queue, self._time = None, time.perf_counter()
            with _tracker.lock:
                self._clock = dict(_tracker.host_clock)
        else:
            queue = stream._queue
            self._time = None
            with _tracker.lock, queue.cond:
                _merge(queue.clock, _tracker.host_clock)
                self._queue = queue
                self._seq = queue.submitted + 1
                self._clock = {**queue.clock, queue.id: self._seq}
                queue.submit(self._mark_time)

    def _mark_time(self) -> None:
        self._time = time.perf_counter()

    def _wait_on(self, stream: Stream) -> None:
        if self._device is None:
            return  # never recorded: nothing to wait for (as CUDA)
        if stream.device != self._device:
            raise RuntimeError(f"mpslinalg.Stream.wait_event: the event was recorded on "
                               f"{self._device}, the stream is on {stream.device}")
        if stream._cuda is not None:
            self._native.wait(stream._cuda)
        elif stream.device.type == "mps":
            self._native.wait()
        elif stream._queue is None:  # the default stream runs on the host: the host waits
            self.synchronize()
        else:
            queue, seq, clock = self._queue, self._seq, dict(self._clock)
            with _tracker.lock, stream._queue.cond:
                _merge(stream._queue.clock, clock)
                if queue is not None and queue is not stream._queue:
                    stream._queue.submit(lambda: queue.wait_for(seq))

    def wait(self, stream: Stream | None = None) -> None:
        """Make later work on ``stream`` (the current stream when None) wait for the event."""
        (stream if stream is not None else current_stream(self._device)).wait_event(self)

    def query(self) -> bool:
        """True when the work the event waits for is complete (or it was never recorded)."""
        if self._native is not None:
            return self._native.query()
        if self._queue is None:
            return True
        if self._queue.done(self._seq):
            _tracker.host_knows(self._clock)
            return True
        return False

    def synchronize(self) -> None:
        """Wait until the work the event waits for is complete."""
        if self._native is not None:
            self._native.synchronize()
            return
        if self._queue is not None:
            self._queue.wait_for(self._seq)
        _tracker.host_knows(self._clock)

    def elapsed_time(self, end_event: Event) -> float:
        """Milliseconds from this event to ``end_event`` (both recorded with
        ``enable_timing=True`` and complete)."""
        _check_event("Event.elapsed_time", end_event)
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("mpslinalg.Event.elapsed_time: both events must be created with "
                               "enable_timing=True")
        if self._native is not None and end_event._native is not None:
            return self._native.elapsed_time(end_event._native)
        if self._time is None or end_event._time is None:
            raise RuntimeError("mpslinalg.Event.elapsed_time: both events must be recorded "
                               "and complete (synchronize first)")
        return (end_event._time - self._time) * 1e3


# ---------------------------------------------------------------- the current stream

_defaults: dict[str, Stream] = {}


def default_stream(device: Any = None) -> Stream:
    """The default stream of ``device``: synchronous on the CPU (the emulator), torch's MPS
    queue on MPS, ``torch.cuda.default_stream`` on CUDA.

    Examples
    --------
    >>> from mpslinalg.ops import streams
    >>> streams.default_stream("cpu").query()
    True
    """
    device = _device(device, "default_stream")
    if device.type == "cuda":
        return Stream(device, _wrap=torch.cuda.default_stream(device))
    key = device.type
    if key not in _defaults:
        _defaults[key] = Stream(device, _default=True)
    return _defaults[key]


def _current_cpu() -> Stream:
    current = getattr(_local, "cpu", None)
    return current if current is not None else default_stream("cpu")


def current_stream(device: Any = None) -> Stream:
    """The stream this thread submits work to on ``device``.

    Examples
    --------
    >>> from mpslinalg.ops import streams
    >>> s = streams.Stream("cpu")
    >>> with streams.stream(s):
    ...     streams.current_stream("cpu") == s
    True
    >>> streams.current_stream("cpu") == streams.default_stream("cpu")
    True
    """
    device = _device(device, "current_stream")
    if device.type == "cuda":
        return Stream(device, _wrap=torch.cuda.current_stream(device))
    if device.type == "mps":
        return default_stream(device)
    return _current_cpu()


@contextlib.contextmanager
def stream(s: Stream | None) -> Iterator[None]:
    """Make ``s`` the current stream of its device in this thread inside the ``with`` block
    (``None``: do nothing), like ``torch.cuda.stream``.

    Examples
    --------
    >>> from mpslinalg.ops import streams
    >>> with streams.stream(None):
    ...     pass
    """
    if s is None:
        yield
        return
    if not isinstance(s, Stream):
        raise TypeError(f"mpslinalg.stream: expected a Stream or None, got {type(s).__name__}")
    if s._cuda is not None:
        with torch.cuda.stream(s._cuda):
            yield
        return
    if s.device.type != "cpu":
        yield  # MPS: torch's one queue is always current
        return
    previous = getattr(_local, "cpu", None)
    _local.cpu = s
    try:
        yield
    finally:
        _local.cpu = previous


def synchronize(device: Any = None) -> None:
    """Wait for all work on every stream of ``device``.

    Examples
    --------
    >>> from mpslinalg.ops import streams
    >>> streams.synchronize("cpu")
    """
    device = _device(device, "synchronize")
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()
    else:
        for queue in list(_QUEUES):
            seq = queue.submitted
            queue.wait_for(seq)
            _tracker.host_knows({**queue.clock, queue.id: seq})
            queue.raise_error("synchronize")




def record_stream(tensor: torch.Tensor, s: Stream) -> None:
    """Tell the allocator that ``tensor`` is used by work on ``s``: its memory is not reused
    until the work submitted to ``s`` so far is complete (``Tensor.record_stream``).

    On CUDA this is ``tensor.record_stream``; on the emulator the stream holds the tensor's
    memory until that work is done; on MPS (one queue) there is nothing to do.

    Examples
    --------
    >>> import torch
    >>> from mpslinalg.ops import streams
    >>> s = streams.Stream("cpu")
    >>> streams.record_stream(torch.ones(3), s)
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"mpslinalg.record_stream: expected a tensor, got "
                        f"{type(tensor).__name__}")
    if not isinstance(s, Stream):
        raise TypeError(f"mpslinalg.record_stream: expected a Stream, got {type(s).__name__}")
    if tensor.device.type != s.device.type:
        raise RuntimeError(f"mpslinalg.record_stream: the tensor is on {tensor.device}, the "
                           f"stream on {s.device}")
    if s._cuda is not None:
        tensor.record_stream(s._cuda)
    elif s._queue is not None:
        storage = tensor.untyped_storage()
        s._queue.submit(lambda: storage)  # released when the worker gets past it
