"""Server streams of the sync client as iterators.

A stream is an iterator over its items and a context manager. Leaving the ``with`` block, calling
``close()``/``cancel()``, or dropping the iterator before its end cancels the RPC; the server
then kills the command (StreamBash) or stops ripgrep (StreamGrep). A cancelled stream ends
quietly (``StopIteration``) with ``cancelled`` true; any other failure raises the
``AgentWorkspaceError`` of its reason from ``next()``.
"""
import collections
import datetime
from typing import Any, Deque, Generic, Iterator, List, Optional, TypeVar

import grpc

from ._common import BashEvents, BashOutput, GrepEvents, OutputChunk
from ._gen.agentworkspace.v1 import tool_pb2
from .errors import from_rpc_error

T = TypeVar("T")

__all__ = ["Stream", "BashStream", "GrepStream", "OutputChunk", "BashOutput"]


class Stream(Generic[T]):
    """An iterator over a server stream's items; see the module's docstring."""

    def __init__(self, call: Any, handler: Any) -> None:
        self._call = call
        self._handler = handler
        self._pending: Deque[T] = collections.deque()
        self._finished = False
        self._cancelled = False

    def __iter__(self) -> "Stream[T]":
        return self

    def __next__(self) -> T:
        while not self._pending:
            if self._finished:
                raise StopIteration
            try:
                message = next(self._call)
            except StopIteration:
                self._finished = True
                self._pending.extend(self._handler.finish())
                continue
            except grpc.RpcError as err:
                self._finished = True
                if self._cancelled:
                    raise StopIteration from None
                raise from_rpc_error(err) from None
            self._pending.extend(self._handler.feed(message))
        return self._pending.popleft()

    def cancel(self) -> None:
        """Cancels the RPC (the server stops the work); the iteration then ends. Harmless once
        the stream has ended."""
        if self._finished:
            return
        self._cancelled = True
        self._finished = True
        self._pending.clear()
        self._call.cancel()

    close = cancel

    @property
    def cancelled(self) -> bool:
        """True when the stream was cancelled before it ended."""
        return self._cancelled

    @property
    def finished(self) -> bool:
        """True once the stream has ended (completely, by an error, or cancelled)."""
        return self._finished and not self._pending

    def __enter__(self) -> "Stream[T]":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.cancel()


class BashStream(Stream[OutputChunk]):
    """StreamBash's output as ``OutputChunk``s (``stream``, ``text``, ``data``), decoded with one
    incremental decoder per stream, so a character split between two chunks decodes whole. Once
    the iteration has ended, ``exited`` holds the ``BashExited`` event (exit code, signal,
    ``timed_out``, totals)."""

    _handler: BashEvents

    def __init__(self, call: Any, encoding: str = "utf-8", errors: str = "replace") -> None:
        super().__init__(call, BashEvents(encoding, errors))

    def __enter__(self) -> "BashStream":
        return self

    @property
    def started_at(self) -> Optional[datetime.datetime]:
        """When the command started (from the first event), in UTC."""
        return self._handler.started_at

    @property
    def exited(self) -> Optional[tool_pb2.BashExited]:
        """The exit event; None before the end, and for a cancelled stream."""
        return self._handler.exited

    @property
    def exit_code(self) -> Optional[int]:
        """The exit code (128+N for signal N); None before the end."""
        return self._handler.exited.exit_code if self._handler.exited is not None else None

    def collect(self) -> BashOutput:
        """Reads the rest of the stream and returns the text of each output stream with the exit
        event. Raises ``AgentWorkspaceError`` if the stream failed, ``RuntimeError`` if it was
        cancelled."""
        out: List[str] = []
        err: List[str] = []
        for chunk in self:
            (out if chunk.stream == "stdout" else err).append(chunk.text)
        if self._handler.exited is None:
            raise RuntimeError("the stream was cancelled before the command exited")
        return BashOutput("".join(out), "".join(err), self._handler.exited)


class GrepStream(Stream[tool_pb2.GrepMatch]):
    """StreamGrep's matches as they are found; ``done`` holds the final ``GrepDone`` (match count,
    ``truncated``) once the iteration has ended."""

    _handler: GrepEvents

    def __init__(self, call: Any) -> None:
        super().__init__(call, GrepEvents())

    def __enter__(self) -> "GrepStream":
        return self

    @property
    def done(self) -> Optional[tool_pb2.GrepDone]:
        return self._handler.done
