"""The standard output and error of a running command, kept from ending it when they cannot be written.

A reader that went away (``rtp-ref certify ... | head``, ``| true``, a CI log pipe closed early), a full disk
(``> /dev/full``) or a stream closed before the start (``>&-``) must not stop a command halfway: a certify run
that died of a broken pipe wrote no report, and its exit status was not its verdict. While ``guarded_streams``
is active, the first write that fails is kept (``GuardedStream.loss``) and everything after it is dropped; the
command runs to its end (its files written, its exit status reached), and the caller says what was lost
(rtp_ref.cli). The failed stream's file descriptor is pointed at /dev/null, so that the processes started later
(pytest's workers, ``--platform all``'s per-platform runs) inherit a stream they can write, and Python's own last
flush at exit cannot fail with a traceback either.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

#: the errors that mean nobody reads the stream any more (a closed pipe, a closed descriptor), as opposed to a
#: reader that wanted the output and did not get it (a full disk, an I/O error)
NO_READER = (errno.EPIPE, errno.EBADF)


class _Sink(io.RawIOBase):
    """The bytes of one standard stream: passed on to ``target`` (the stream's own binary buffer; None: the
    stream was closed when the command started) until a write fails, dropped from then on."""

    def __init__(self, target: IO[bytes] | None) -> None:
        super().__init__()
        self._target = target
        #: the first failed write's error (EBADF for the first write to a stream closed from the start); None
        #: while everything went out
        self.lost: OSError | None = None

    def writable(self) -> bool:
        return True

    def write(self, data: ReadableBuffer, /) -> int:
        size = memoryview(data).nbytes
        if self.lost is None and self._target is None:
            self.lost = OSError(errno.EBADF, "closed when the command started")
        elif self.lost is None and self._target is not None:
            try:
                self._target.write(bytes(data))
                self._target.flush()
            except OSError as exc:
                self.lost = exc
                self.silence()
        return size

    def isatty(self) -> bool:
        return self.lost is None and self._target is not None and self._target.isatty()

    def fileno(self) -> int:
        if self._target is None:
            raise io.UnsupportedOperation("the stream was closed when the command started")
        return self._target.fileno()

    def silence(self) -> None:
        """Point the target's file descriptor at /dev/null (when it has one): what is still buffered in the
        target, and whatever a later child process writes there, then goes nowhere instead of failing."""
        with contextlib.suppress(OSError, ValueError):  # no descriptor (an in-memory stream): nothing to point
            descriptor = self.fileno()
            _point_at_devnull(descriptor)


def _point_at_devnull(descriptor: int) -> None:
    """Make ``descriptor`` an inheritable descriptor of /dev/null (open for writing)."""
    null = os.open(os.devnull, os.O_WRONLY)
    if null == descriptor:  # the descriptor was free: os.open took it, not inheritable by default
        os.set_inheritable(null, True)
        return
    os.dup2(null, descriptor)  # inheritable by default
    os.close(null)


def _is_open(descriptor: int) -> bool:
    try:
        os.fstat(descriptor)
    except OSError:
        return False
    return True


@dataclass
class GuardedStream:
    """One standard stream while the command runs: ``stream`` stands in for ``original`` (None: the stream is
    used unguarded, as an in-memory stream without a binary buffer is)."""

    original: TextIO | None
    stream: TextIO | None
    sink: _Sink | None

    def loss(self) -> OSError | None:
        """Why the stream stopped taking output (None: it took all of it), once what the stand-in still holds
        has been written."""
        if self.stream is not None:
            self.stream.flush()  # never raises: the sink drops what it cannot write
        return self.sink.lost if self.sink is not None else None


def _closed(descriptor: int) -> GuardedStream:
    """The stand-in of a stream that was closed when Python started (sys.stdout is None): every write to it is
    lost (EBADF, as a write to a closed descriptor fails). Its descriptor, when still free, is taken by /dev/null,
    so that no file opened later gets it and the processes started later inherit a stream they can write."""
    if not _is_open(descriptor):
        _point_at_devnull(descriptor)
    sink = _Sink(None)
    return GuardedStream(None, io.TextIOWrapper(io.BufferedWriter(sink), encoding="utf-8"), sink)


def _guard(original: TextIO | None, descriptor: int) -> GuardedStream:
    """``original`` (sys.stdout or sys.stderr, whose file descriptor is ``descriptor``) behind a sink."""
    if original is None:
        return _closed(descriptor)
    target = getattr(original, "buffer", None)
    if target is None:
        return GuardedStream(original, None, None)
    sink = _Sink(target)
    try:
        original.flush()
    except OSError as exc:  # the stream failed before the command began
        sink.lost = exc
        sink.silence()
    stream = io.TextIOWrapper(io.BufferedWriter(sink), encoding=original.encoding, errors=original.errors,
                              line_buffering=getattr(original, "line_buffering", False))
    return GuardedStream(original, stream, sink)


def _restore(guarded: GuardedStream) -> TextIO | None:
    """Flush the stand-in and return the stream to put back; a lost stream's descriptor is silenced again, as
    pytest's output capture may have put the broken one back meanwhile."""
    if guarded.loss() is not None and guarded.sink is not None:
        guarded.sink.silence()
    return guarded.original


@contextlib.contextmanager
def guarded_streams() -> Iterator[tuple[GuardedStream, GuardedStream]]:
    """Run the block with sys.stdout and sys.stderr guarded (module doc); yields (stdout, stderr), whose
    ``loss()`` says whether and why each stopped taking output. Both are put back when the block ends."""
    out, err = _guard(sys.stdout, 1), _guard(sys.stderr, 2)
    if out.stream is not None:
        sys.stdout = out.stream
    if err.stream is not None:
        sys.stderr = err.stream
    try:
        yield out, err
    finally:
        if out.stream is not None:
            sys.stdout = _restore(out)  # None: closed from the start, as before
        if err.stream is not None:
            sys.stderr = _restore(err)
