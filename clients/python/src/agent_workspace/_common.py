"""What the sync and asyncio clients share: targets, credentials, request building, and the
decoding of streams (one place, so both APIs decode alike)."""
import codecs
import datetime
import urllib.parse
from typing import Any, Dict, Iterable, List, Literal, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

from ._gen.agentworkspace.v1 import git_pb2, process_pb2, tool_pb2, workspace_pb2

#: gRPC call metadata.
Metadata = Tuple[Tuple[str, str], ...]

#: Default channel options: messages up to 64 MiB each way (grpcio's default receive limit is
#: 4 MiB, less than a ReadFile window of 2000 long lines; the server accepts 32 MiB).
CHANNEL_OPTIONS: Tuple[Tuple[str, Any], ...] = (
    ("grpc.max_receive_message_length", 64 << 20),
    ("grpc.max_send_message_length", 64 << 20),
)

TaskLike = Union[workspace_pb2.TaskContext, Mapping[str, Any]]
PatchLike = Union[tool_pb2.Patch, Tuple[str, str]]


def parse_url(url: str) -> Tuple[str, bool]:
    """``http://host:port`` → (``host:port``, insecure); ``https://host[:port]`` → TLS (port 443 by
    default); a bare ``host:port`` is plaintext."""
    if "://" not in url:
        return url, False
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"unsupported URL scheme {parts.scheme!r}: use http:// or https://")
    if parts.path not in ("", "/") or parts.query:
        raise ValueError("the server URL must have no path: gRPC serves at the root")
    host = parts.hostname or ""
    if not host:
        raise ValueError("the server URL has no host")
    if ":" in host:
        host = f"[{host}]"
    secure = parts.scheme == "https"
    return f"{host}:{parts.port or (443 if secure else 80)}", secure


#: The services of a connection, by the attribute its stub is kept under.
STUBS = ("tools", "processes", "workspaces", "config", "audit")


def method_names(conn: Any) -> Dict[int, Tuple[str, str]]:
    """Each of a connection's stub methods by identity → (stub attribute, method name), so that a
    call refused by one server can be made on another server's connection."""
    names: Dict[int, Tuple[str, str]] = {}
    for attr in STUBS:
        stub = getattr(conn, attr, None)
        if stub is None:
            continue
        for name, method in vars(stub).items():
            if not name.startswith("_"):
                names[id(method)] = (attr, name)
    return names


def redirected(conn: Any, error: Any, method: Any) -> Optional[Any]:
    """The same method on the connection to the server a refusal names (made on first use and kept
    in ``conn._others``), when ``conn`` follows refusals and ``error`` is one to follow; else None."""
    target = served_elsewhere(error, conn._url) if conn._make is not None else None
    where = conn._names.get(id(method))
    if target is None or where is None or target == conn._url:
        return None
    other = conn._others.get(target)
    if other is None:
        other = conn._others[target] = conn._make(target)
    return getattr(getattr(other, where[0]), where[1])


def served_elsewhere(error: Any, from_url: str) -> Optional[str]:
    """The server a ``WorkspaceServedElsewhere`` refusal names, when it is one a client follows:
    an http(s) URL, never plain http from an https server; else None."""
    if getattr(error, "reason", None) != "WORKSPACE_SERVED_ELSEWHERE":
        return None
    target = str((getattr(error, "metadata", None) or {}).get("server_url", ""))
    parts = urllib.parse.urlsplit(target)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    if from_url.startswith("https:") and parts.scheme != "https":
        return None
    return target.rstrip("/")


def bearer(secret: Optional[str]) -> Metadata:
    """The call metadata that carries an API key or a session token (never logged)."""
    return (("authorization", f"Bearer {secret}"),) if secret else ()


def millis(seconds: Optional[float]) -> int:
    return 0 if seconds is None else max(1, round(seconds * 1000))


def task_context(task: Optional[TaskLike]) -> Optional[workspace_pb2.TaskContext]:
    if task is None or isinstance(task, workspace_pb2.TaskContext):
        return task
    return workspace_pb2.TaskContext(**task)


def patches(items: Iterable[PatchLike]) -> List[tool_pb2.Patch]:
    return [p if isinstance(p, tool_pb2.Patch) else tool_pb2.Patch(find=p[0], replace=p[1]) for p in items]


def bash_request(workspace_id: str, command: str, workdir: str, env: Optional[Mapping[str, str]], command_timeout: Optional[float]) -> tool_pb2.BashRequest:
    return tool_pb2.BashRequest(workspace_id=workspace_id, command=command, workdir=workdir, env=dict(env or {}), timeout_ms=millis(command_timeout))


def stream_bash_request(
    workspace_id: str, command: str, workdir: str, env: Optional[Mapping[str, str]], command_timeout: Optional[float], max_output_bytes: int
) -> tool_pb2.StreamBashRequest:
    return tool_pb2.StreamBashRequest(
        workspace_id=workspace_id, command=command, workdir=workdir, env=dict(env or {}), timeout_ms=millis(command_timeout), max_output_bytes=max_output_bytes
    )


def grep_fields(pattern: str, path: str, glob: str, case_sensitive: Optional[bool], context_lines: int, max_results: int) -> dict:
    fields: dict = dict(pattern=pattern, path=path, glob=glob, context_lines=context_lines, max_results=max_results)
    if case_sensitive is not None:
        fields["case_sensitive"] = case_sensitive
    return fields


def git_diff_request(workspace_id: str, paths: Sequence[str], ref: str, context_lines: Optional[int]) -> git_pb2.GitDiffRequest:
    request = git_pb2.GitDiffRequest(workspace_id=workspace_id, paths=list(paths), ref=ref)
    if context_lines is not None:
        request.context_lines = context_lines
    return request


def start_process_request(
    workspace_id: str, command: str, workdir: str, env: Optional[Mapping[str, str]], stdin: bool, pty: Optional[Tuple[int, int]], timeout_ms: int
) -> process_pb2.StartProcessRequest:
    return process_pb2.StartProcessRequest(
        workspace_id=workspace_id, command=command, workdir=workdir, env=dict(env or {}), stdin=stdin, pty=terminal_size(pty), timeout_ms=timeout_ms
    )


def terminal_size(size: Optional[Tuple[int, int]]) -> Optional[process_pb2.TerminalSize]:
    """``(rows, cols)`` → a ``TerminalSize``; None stays None (no terminal)."""
    if size is None:
        return None
    rows, cols = size
    return process_pb2.TerminalSize(rows=rows, cols=cols)


def stdin_bytes(data: Union[str, bytes]) -> bytes:
    """Bytes for WriteProcessStdin: a str is encoded as UTF-8."""
    return data.encode("utf-8") if isinstance(data, str) else bytes(data)


class OutputChunk(NamedTuple):
    """A piece of a streamed command's output."""

    #: Which stream it came from.
    stream: Literal["stdout", "stderr"]
    #: The text decoded so far: a character split between two chunks is decoded whole in the
    #: second (the first's text then lacks it, and may be empty).
    text: str
    #: The chunk's bytes as the server sent them (empty for the decoders' final flush).
    data: bytes


class BashOutput(NamedTuple):
    """A streamed command's whole output, from ``BashStream.collect()``."""

    stdout: str
    stderr: str
    exited: tool_pb2.BashExited


class BashEvents:
    """Turns StreamBash messages into text chunks with one incremental decoder per stream, and
    keeps the start and exit events."""

    def __init__(self, encoding: str, errors: str) -> None:
        self._decoders = {name: codecs.getincrementaldecoder(encoding)(errors) for name in ("stdout", "stderr")}
        self.started_at: Optional[datetime.datetime] = None
        self.exited: Optional[tool_pb2.BashExited] = None
        self._flushed = False

    def feed(self, message: tool_pb2.StreamBashResponse) -> List[OutputChunk]:
        kind = message.WhichOneof("event")
        if kind == "stdout" or kind == "stderr":
            data: bytes = getattr(message, kind)
            return [OutputChunk(kind, self._decoders[kind].decode(data), data)]
        if kind == "started":
            self.started_at = message.started.started_at.ToDatetime(tzinfo=datetime.timezone.utc)
        elif kind == "exited":
            self.exited = message.exited
            return self.finish()
        return []

    def finish(self) -> List[OutputChunk]:
        """Flushes the decoders (an incomplete character at the very end becomes a replacement
        character under errors="replace")."""
        if self._flushed:
            return []
        self._flushed = True
        chunks: List[OutputChunk] = []
        for name in ("stdout", "stderr"):
            tail = self._decoders[name].decode(b"", final=True)
            if tail:
                chunks.append(OutputChunk(name, tail, b""))  # type: ignore[arg-type]
        return chunks


class GrepEvents:
    """Turns StreamGrep messages into matches and keeps the final ``GrepDone``."""

    def __init__(self) -> None:
        self.done: Optional[tool_pb2.GrepDone] = None

    def feed(self, message: tool_pb2.StreamGrepResponse) -> List[tool_pb2.GrepMatch]:
        if message.WhichOneof("event") == "match":
            return [message.match]
        if message.WhichOneof("event") == "done":
            self.done = message.done
        return []

    def finish(self) -> list:
        return []


class PassThrough:
    """Streams whose messages are the items (WatchSession, AttachProcess)."""

    def feed(self, message: Any) -> list:
        return [message]

    def finish(self) -> list:
        return []


#: Session statuses after which WatchSession (without follow) ends.
SETTLED = (workspace_pb2.SESSION_STATUS_ACTIVE, workspace_pb2.SESSION_STATUS_DEGRADED, workspace_pb2.SESSION_STATUS_ENDED)
