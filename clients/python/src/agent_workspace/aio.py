"""The asyncio client over ``grpc.aio``: the same API as the sync one, with ``await`` and
``async for``/``async with``.

    async with AsyncAgentWorkspace(url, api_key=key) as client:
        async with client.start_session("coder") as session:
            await session.wait_ready()
            result = await session.workspace.bash("pytest -q")
            async with session.workspace.stream_bash("make") as stream:
                async for chunk in stream:
                    print(chunk.text, end="")

Streams cancel their RPC when their ``async with`` block is left, or on ``cancel()``/``aclose()``
(the server then kills the command). Make the client inside a running event loop.
"""
import collections
import datetime
from typing import Any, Awaitable, Callable, Deque, Dict, Generator, Generic, Iterable, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union

import grpc
import grpc.aio

from . import _common as c
from ._common import BashEvents, BashOutput, GrepEvents, OutputChunk
from ._gen.agentworkspace.v1 import (
    config_pb2,
    config_pb2_grpc,
    git_pb2,
    process_pb2,
    process_pb2_grpc,
    tool_pb2,
    tool_pb2_grpc,
    workspace_pb2,
    workspace_pb2_grpc,
)
from .errors import from_rpc_error

T = TypeVar("T")
R = TypeVar("R")

__all__ = ["AsyncAgentWorkspace", "AsyncWorkspace", "AsyncGit", "AsyncProcesses", "AsyncSession", "AsyncStream", "AsyncBashStream", "AsyncGrepStream"]


class _Conn:
    def __init__(
        self, channel: grpc.aio.Channel, timeout: Optional[float], url: str = "", make: Optional[Callable[[str], "_Conn"]] = None
    ) -> None:
        self.channel = channel
        self.timeout = timeout
        self.tools = tool_pb2_grpc.ToolServiceStub(channel)
        self.processes = process_pb2_grpc.ProcessServiceStub(channel)
        self.workspaces = workspace_pb2_grpc.WorkspaceServiceStub(channel)
        self.config = config_pb2_grpc.ConfigServiceStub(channel)
        self._url = url.rstrip("/")
        self._make = make
        self._others: Dict[str, "_Conn"] = {}
        self._names = c.method_names(self)

    async def unary(self, method: Callable[..., Any], request: Any, metadata: c.Metadata, timeout: Optional[float]) -> Any:
        try:
            return await method(request, timeout=self.timeout if timeout is None else timeout, metadata=metadata)
        except grpc.RpcError as err:
            error = from_rpc_error(err)
        # Refused because another server serves the workspace or session: sent there, once.
        there = c.redirected(self, error, method)
        if there is None:
            raise error
        try:
            return await there(request, timeout=self.timeout if timeout is None else timeout, metadata=metadata)
        except grpc.RpcError as err:
            raise from_rpc_error(err) from None

    def stream(self, method: Callable[..., Any], request: Any, metadata: c.Metadata, timeout: Optional[float]) -> Any:
        return method(request, timeout=self.timeout if timeout is None else timeout, metadata=metadata)

    async def close(self) -> None:
        for other in self._others.values():
            await other.close()
        self._others.clear()
        await self.channel.close()


class AsyncStream(Generic[T]):
    """An async iterator over a server stream's items (see agent_workspace.streams)."""

    def __init__(self, call: Any, handler: Any) -> None:
        self._call = call
        self._handler = handler
        self._pending: Deque[T] = collections.deque()
        self._finished = False
        self._cancelled = False

    def __aiter__(self) -> "AsyncStream[T]":
        return self

    async def __anext__(self) -> T:
        while not self._pending:
            if self._finished:
                raise StopAsyncIteration
            try:
                message = await self._call.read()
            except grpc.RpcError as err:
                self._finished = True
                if self._cancelled:
                    raise StopAsyncIteration from None
                raise from_rpc_error(err) from None
            if message is grpc.aio.EOF:
                self._finished = True
                self._pending.extend(self._handler.finish())
                continue
            self._pending.extend(self._handler.feed(message))
        return self._pending.popleft()

    def cancel(self) -> None:
        """Cancels the RPC (the server stops the work); the iteration then ends."""
        if self._finished:
            return
        self._cancelled = True
        self._finished = True
        self._pending.clear()
        self._call.cancel()

    async def aclose(self) -> None:
        self.cancel()

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    async def __aenter__(self) -> "AsyncStream[T]":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.cancel()


class AsyncBashStream(AsyncStream[OutputChunk]):
    """StreamBash's output as ``OutputChunk``s; ``exited`` once the iteration has ended."""

    _handler: BashEvents

    def __init__(self, call: Any, encoding: str = "utf-8", errors: str = "replace") -> None:
        super().__init__(call, BashEvents(encoding, errors))

    async def __aenter__(self) -> "AsyncBashStream":
        return self

    @property
    def started_at(self) -> Optional[datetime.datetime]:
        return self._handler.started_at

    @property
    def exited(self) -> Optional[tool_pb2.BashExited]:
        return self._handler.exited

    @property
    def exit_code(self) -> Optional[int]:
        return self._handler.exited.exit_code if self._handler.exited is not None else None

    async def collect(self) -> BashOutput:
        """Reads the rest; the text of each stream and the exit event."""
        out, err = [], []
        async for chunk in self:
            (out if chunk.stream == "stdout" else err).append(chunk.text)
        if self._handler.exited is None:
            raise RuntimeError("the stream was cancelled before the command exited")
        return BashOutput("".join(out), "".join(err), self._handler.exited)


class AsyncGrepStream(AsyncStream[tool_pb2.GrepMatch]):
    """StreamGrep's matches; ``done`` once the iteration has ended."""

    _handler: GrepEvents

    def __init__(self, call: Any) -> None:
        super().__init__(call, GrepEvents())

    async def __aenter__(self) -> "AsyncGrepStream":
        return self

    @property
    def done(self) -> Optional[tool_pb2.GrepDone]:
        return self._handler.done


class AsyncGit:
    """The git tools of an ``AsyncWorkspace``."""

    def __init__(self, workspace: "AsyncWorkspace") -> None:
        self._ws = workspace

    async def status(self, *, timeout: Optional[float] = None) -> git_pb2.GitStatusResponse:
        return await self._ws._unary(self._ws._conn.tools.GitStatus, git_pb2.GitStatusRequest(workspace_id=self._ws.id), timeout)

    async def diff(self, paths: Sequence[str] = (), *, ref: str = "", context_lines: Optional[int] = None, timeout: Optional[float] = None) -> git_pb2.GitDiffResponse:
        return await self._ws._unary(self._ws._conn.tools.GitDiff, c.git_diff_request(self._ws.id, paths, ref, context_lines), timeout)

    async def commit(self, message: str, files: Sequence[str] = (), *, all: bool = False, timeout: Optional[float] = None) -> git_pb2.GitCommitResponse:
        request = git_pb2.GitCommitRequest(workspace_id=self._ws.id, message=message, files=list(files), all=all)
        return await self._ws._unary(self._ws._conn.tools.GitCommit, request, timeout)

    async def checkout(self, branch: str, *, create: bool = False, timeout: Optional[float] = None) -> git_pb2.GitCheckoutResponse:
        return await self._ws._unary(self._ws._conn.tools.GitCheckout, git_pb2.GitCheckoutRequest(workspace_id=self._ws.id, branch=branch, create=create), timeout)

    async def push(self, branch: str = "", *, force: bool = False, timeout: Optional[float] = None) -> git_pb2.GitPushResponse:
        return await self._ws._unary(self._ws._conn.tools.GitPush, git_pb2.GitPushRequest(workspace_id=self._ws.id, branch=branch, force=force), timeout)


class AsyncProcesses:
    """The background processes and exposed ports of an ``AsyncWorkspace`` (see ``Processes``)."""

    def __init__(self, workspace: "AsyncWorkspace") -> None:
        self._ws = workspace

    async def start(
        self,
        command: str,
        *,
        workdir: str = "",
        env: Optional[Mapping[str, str]] = None,
        stdin: bool = False,
        pty: Optional[Tuple[int, int]] = None,
        timeout_ms: int = 0,
        timeout: Optional[float] = None,
    ) -> process_pb2.Process:
        request = c.start_process_request(self._ws.id, command, workdir, env, stdin, pty, timeout_ms)
        return (await self._ws._unary(self._ws._conn.processes.StartProcess, request, timeout)).process

    async def list(self, *, timeout: Optional[float] = None) -> List[process_pb2.Process]:
        return list((await self._ws._unary(self._ws._conn.processes.ListProcesses, process_pb2.ListProcessesRequest(workspace_id=self._ws.id), timeout)).processes)

    async def get(self, process_id: str, *, timeout: Optional[float] = None) -> process_pb2.Process:
        request = process_pb2.GetProcessRequest(workspace_id=self._ws.id, process_id=process_id)
        return (await self._ws._unary(self._ws._conn.processes.GetProcess, request, timeout)).process

    async def read(
        self, process_id: str, *, stdout_offset: int = 0, stderr_offset: int = 0, max_bytes: int = 0, timeout: Optional[float] = None
    ) -> process_pb2.ReadProcessOutputResponse:
        request = process_pb2.ReadProcessOutputRequest(
            workspace_id=self._ws.id, process_id=process_id, stdout_offset=stdout_offset, stderr_offset=stderr_offset, max_bytes=max_bytes
        )
        return await self._ws._unary(self._ws._conn.processes.ReadProcessOutput, request, timeout)

    def attach(self, process_id: str, *, stdout_offset: int = 0, stderr_offset: int = 0, timeout: Optional[float] = None) -> "AsyncStream[process_pb2.AttachProcessResponse]":
        request = process_pb2.AttachProcessRequest(workspace_id=self._ws.id, process_id=process_id, stdout_offset=stdout_offset, stderr_offset=stderr_offset)
        return AsyncStream(self._ws._conn.stream(self._ws._conn.processes.AttachProcess, request, self._ws._metadata, timeout), c.PassThrough())

    async def write(self, process_id: str, data: Union[str, bytes], *, close: bool = False, timeout: Optional[float] = None) -> int:
        request = process_pb2.WriteProcessStdinRequest(workspace_id=self._ws.id, process_id=process_id, data=c.stdin_bytes(data), close=close)
        return (await self._ws._unary(self._ws._conn.processes.WriteProcessStdin, request, timeout)).bytes_written

    async def close_stdin(self, process_id: str, *, timeout: Optional[float] = None) -> None:
        await self.write(process_id, b"", close=True, timeout=timeout)

    async def resize(self, process_id: str, rows: int, cols: int, *, timeout: Optional[float] = None) -> None:
        request = process_pb2.ResizeProcessRequest(workspace_id=self._ws.id, process_id=process_id, size=process_pb2.TerminalSize(rows=rows, cols=cols))
        await self._ws._unary(self._ws._conn.processes.ResizeProcess, request, timeout)

    async def signal(self, process_id: str, signal: str, *, timeout: Optional[float] = None) -> None:
        request = process_pb2.SignalProcessRequest(workspace_id=self._ws.id, process_id=process_id, signal=signal)
        await self._ws._unary(self._ws._conn.processes.SignalProcess, request, timeout)

    async def wait(self, process_id: str, *, timeout_ms: int = 0, timeout: Optional[float] = None) -> process_pb2.WaitProcessResponse:
        request = process_pb2.WaitProcessRequest(workspace_id=self._ws.id, process_id=process_id, timeout_ms=timeout_ms)
        return await self._ws._unary(self._ws._conn.processes.WaitProcess, request, timeout)

    async def expose_port(self, port: int, *, timeout: Optional[float] = None) -> process_pb2.ExposePortResponse:
        return await self._ws._unary(self._ws._conn.processes.ExposePort, process_pb2.ExposePortRequest(workspace_id=self._ws.id, port=port), timeout)

    async def unexpose_port(self, port: int, *, timeout: Optional[float] = None) -> int:
        request = process_pb2.UnexposePortRequest(workspace_id=self._ws.id, port=port)
        return (await self._ws._unary(self._ws._conn.processes.UnexposePort, request, timeout)).closed_connections

    async def list_exposed_ports(self, *, timeout: Optional[float] = None) -> List[process_pb2.ExposedPort]:
        return list((await self._ws._unary(self._ws._conn.processes.ListExposedPorts, process_pb2.ListExposedPortsRequest(workspace_id=self._ws.id), timeout)).ports)


class AsyncWorkspace:
    """The asyncio ``Workspace``: the same methods, awaited; streams are async iterators."""

    def __init__(self, conn: _Conn, workspace_id: str, metadata: c.Metadata, *, info: Optional[workspace_pb2.Workspace] = None, owned: bool = False) -> None:
        self._conn = conn
        self._metadata = metadata
        self._owned = owned
        self.id = workspace_id
        self.info = info
        self.git = AsyncGit(self)
        self.processes = AsyncProcesses(self)

    def __repr__(self) -> str:
        return f"AsyncWorkspace(id={self.id!r})" if self.id else "AsyncWorkspace(<the session's workspace>)"

    async def _unary(self, method: Callable[..., Any], request: Any, timeout: Optional[float]) -> Any:
        return await self._conn.unary(method, request, self._metadata, timeout)

    async def __aenter__(self) -> "AsyncWorkspace":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self._owned:
            await self.delete_workspace()

    async def refresh(self, *, timeout: Optional[float] = None) -> workspace_pb2.Workspace:
        self.info = (await self._unary(self._conn.workspaces.GetWorkspace, workspace_pb2.GetWorkspaceRequest(id=self.id), timeout)).workspace
        return self.info

    async def delete_workspace(self, *, timeout: Optional[float] = None) -> None:
        await self._unary(self._conn.workspaces.DeleteWorkspace, workspace_pb2.DeleteWorkspaceRequest(id=self.id), timeout)
        self._owned = False

    async def bash(
        self, command: str, *, workdir: str = "", env: Optional[Mapping[str, str]] = None, command_timeout: Optional[float] = None, timeout: Optional[float] = None
    ) -> tool_pb2.BashResponse:
        return await self._unary(self._conn.tools.Bash, c.bash_request(self.id, command, workdir, env, command_timeout), timeout)

    def stream_bash(
        self,
        command: str,
        *,
        workdir: str = "",
        env: Optional[Mapping[str, str]] = None,
        command_timeout: Optional[float] = None,
        max_output_bytes: int = 0,
        encoding: str = "utf-8",
        errors: str = "replace",
        timeout: Optional[float] = None,
    ) -> AsyncBashStream:
        request = c.stream_bash_request(self.id, command, workdir, env, command_timeout, max_output_bytes)
        return AsyncBashStream(self._conn.stream(self._conn.tools.StreamBash, request, self._metadata, timeout), encoding, errors)

    async def read(self, path: str, *, offset: int = 0, limit: int = 0, timeout: Optional[float] = None) -> tool_pb2.ReadFileResponse:
        return await self._unary(self._conn.tools.ReadFile, tool_pb2.ReadFileRequest(workspace_id=self.id, path=path, offset=offset, limit=limit), timeout)

    async def write(self, path: str, content: str, *, timeout: Optional[float] = None) -> tool_pb2.WriteFileResponse:
        return await self._unary(self._conn.tools.WriteFile, tool_pb2.WriteFileRequest(workspace_id=self.id, path=path, content=content), timeout)

    async def edit(self, path: str, old_string: str, new_string: str, *, replace_all: bool = False, timeout: Optional[float] = None) -> tool_pb2.EditFileResponse:
        request = tool_pb2.EditFileRequest(workspace_id=self.id, path=path, old_string=old_string, new_string=new_string, replace_all=replace_all)
        return await self._unary(self._conn.tools.EditFile, request, timeout)

    async def patch(self, path: str, patches: Iterable[c.PatchLike], *, timeout: Optional[float] = None) -> tool_pb2.PatchFileResponse:
        return await self._unary(self._conn.tools.PatchFile, tool_pb2.PatchFileRequest(workspace_id=self.id, path=path, patches=c.patches(patches)), timeout)

    async def delete(self, path: str, *, timeout: Optional[float] = None) -> None:
        await self._unary(self._conn.tools.DeleteFile, tool_pb2.DeleteFileRequest(workspace_id=self.id, path=path), timeout)

    async def list(self, path: str = "", *, pattern: str = "", names_only: bool = False, timeout: Optional[float] = None) -> tool_pb2.ListFilesResponse:
        return await self._unary(self._conn.tools.ListFiles, tool_pb2.ListFilesRequest(workspace_id=self.id, path=path, pattern=pattern, names_only=names_only), timeout)

    async def glob(self, pattern: str, *, path: str = "", limit: int = 0, timeout: Optional[float] = None) -> tool_pb2.GlobResponse:
        return await self._unary(self._conn.tools.Glob, tool_pb2.GlobRequest(workspace_id=self.id, pattern=pattern, path=path, limit=limit), timeout)

    async def grep(
        self, pattern: str, *, path: str = "", glob: str = "", case_sensitive: Optional[bool] = None, context_lines: int = 0, max_results: int = 0, timeout: Optional[float] = None
    ) -> tool_pb2.GrepResponse:
        request = tool_pb2.GrepRequest(workspace_id=self.id, **c.grep_fields(pattern, path, glob, case_sensitive, context_lines, max_results))
        return await self._unary(self._conn.tools.Grep, request, timeout)

    def stream_grep(
        self, pattern: str, *, path: str = "", glob: str = "", case_sensitive: Optional[bool] = None, context_lines: int = 0, max_results: int = 0, timeout: Optional[float] = None
    ) -> AsyncGrepStream:
        request = tool_pb2.StreamGrepRequest(workspace_id=self.id, **c.grep_fields(pattern, path, glob, case_sensitive, context_lines, max_results))
        return AsyncGrepStream(self._conn.stream(self._conn.tools.StreamGrep, request, self._metadata, timeout))


class AsyncSession:
    """The asyncio ``Session``; ``async with`` ends it on exit."""

    def __init__(self, conn: _Conn, info: workspace_pb2.Session, token: Optional[str], operator: c.Metadata) -> None:
        self._conn = conn
        self._token = token
        self._operator = operator
        self.info = info
        self.id = info.id
        self.workspace = AsyncWorkspace(conn, "", c.bearer(token)) if token else AsyncWorkspace(conn, info.workspace_id, operator)

    @property
    def token(self) -> Optional[str]:
        return self._token

    def __repr__(self) -> str:
        return f"AsyncSession(id={self.id!r}, status={workspace_pb2.SessionStatus.Name(self.info.status)})"

    def _reader(self) -> c.Metadata:
        return c.bearer(self._token) if self._token else self._operator

    async def refresh(self, *, timeout: Optional[float] = None) -> workspace_pb2.Session:
        self.info = (await self._conn.unary(self._conn.workspaces.GetSession, workspace_pb2.GetSessionRequest(id=self.id), self._reader(), timeout)).session
        return self.info

    def events(self, *, follow: bool = False, timeout: Optional[float] = None) -> "AsyncStream[workspace_pb2.WatchSessionResponse]":
        call = self._conn.stream(self._conn.workspaces.WatchSession, workspace_pb2.WatchSessionRequest(id=self.id, follow=follow), self._reader(), timeout)
        return AsyncStream(call, c.PassThrough())

    async def wait_ready(self, *, timeout: Optional[float] = None) -> workspace_pb2.Session:
        async with self.events(timeout=timeout) as events:
            async for _ in events:
                pass
        return await self.refresh(timeout=timeout)

    async def end(self, *, timeout: Optional[float] = None) -> workspace_pb2.Session:
        self.info = (await self._conn.unary(self._conn.workspaces.EndSession, workspace_pb2.EndSessionRequest(id=self.id), self._operator, timeout)).session
        return self.info

    async def __aenter__(self) -> "AsyncSession":
        return self

    async def __aexit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is None:
            await self.end()
            return
        try:
            await self.end()
        except Exception:
            pass


class _Starting(Awaitable[AsyncSession]):
    """``start_session``'s result: await it for the session, or ``async with`` it to end the
    session on exit."""

    def __init__(self, start: Callable[[], Awaitable[AsyncSession]]) -> None:
        self._start = start
        self._session: Optional[AsyncSession] = None

    def __await__(self) -> Generator[Any, None, AsyncSession]:
        return self._start().__await__()

    async def __aenter__(self) -> AsyncSession:
        self._session = await self._start()
        return self._session

    async def __aexit__(self, *exc: Any) -> None:
        assert self._session is not None
        await self._session.__aexit__(*exc)


class AsyncAgentWorkspace:
    """The asyncio ``AgentWorkspace`` (same arguments)."""

    def __init__(
        self,
        url: str,
        api_key: Optional[str] = None,
        session_token: Optional[str] = None,
        *,
        timeout: Optional[float] = None,
        root_certificates: Optional[bytes] = None,
        channel_options: Sequence[Tuple[str, Any]] = (),
        follow_redirects: bool = True,
    ) -> None:
        options = list(c.CHANNEL_OPTIONS) + list(channel_options)

        def channel_to(u: str) -> grpc.aio.Channel:
            target, secure = c.parse_url(u)
            if secure:
                return grpc.aio.secure_channel(target, grpc.ssl_channel_credentials(root_certificates), options=options)
            return grpc.aio.insecure_channel(target, options=options)

        def make(u: str) -> _Conn:
            return _Conn(channel_to(u), timeout, u, make)

        self.url = url
        self._conn = _Conn(channel_to(url), timeout, url, make if follow_redirects else None)
        self._metadata = c.bearer(api_key or session_token)

    def __repr__(self) -> str:
        return f"AsyncAgentWorkspace(url={self.url!r})"

    async def close(self) -> None:
        await self._conn.close()

    async def __aenter__(self) -> "AsyncAgentWorkspace":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def workspace(self, workspace_id: str = "") -> AsyncWorkspace:
        return AsyncWorkspace(self._conn, workspace_id, self._metadata)

    async def create_workspace(
        self,
        *,
        provider: str = "",
        agent_type: str = "",
        labels: Optional[Mapping[str, str]] = None,
        image: str = "",
        limits: Optional[workspace_pb2.ResourceLimits] = None,
        mounts: Sequence[workspace_pb2.HostMount] = (),
        timeout: Optional[float] = None,
    ) -> AsyncWorkspace:
        request = workspace_pb2.CreateWorkspaceRequest(provider=provider, agent_type=agent_type, labels=dict(labels or {}), image=image, limits=limits, mounts=list(mounts))
        info = (await self._conn.unary(self._conn.workspaces.CreateWorkspace, request, self._metadata, timeout)).workspace
        return AsyncWorkspace(self._conn, info.id, self._metadata, info=info, owned=True)

    async def delete_workspace(self, workspace_id: str, *, timeout: Optional[float] = None) -> None:
        await self._conn.unary(self._conn.workspaces.DeleteWorkspace, workspace_pb2.DeleteWorkspaceRequest(id=workspace_id), self._metadata, timeout)

    def start_session(
        self,
        agent_type: str,
        *,
        task: Optional[c.TaskLike] = None,
        labels: Optional[Mapping[str, str]] = None,
        mounts: Sequence[workspace_pb2.HostMount] = (),
        workspace_id: str = "",
        timeout: Optional[float] = None,
    ) -> _Starting:
        """``session = await client.start_session(...)``, or ``async with client.start_session(...) as session:``."""
        request = workspace_pb2.StartSessionRequest(agent_type=agent_type, task=c.task_context(task), labels=dict(labels or {}), mounts=list(mounts), workspace_id=workspace_id)

        async def start() -> AsyncSession:
            response = await self._conn.unary(self._conn.workspaces.StartSession, request, self._metadata, timeout)
            return AsyncSession(self._conn, response.session, response.session_token, self._metadata)

        return _Starting(start)

    async def session(self, session_id: str = "", *, timeout: Optional[float] = None) -> AsyncSession:
        info = (await self._conn.unary(self._conn.workspaces.GetSession, workspace_pb2.GetSessionRequest(id=session_id), self._metadata, timeout)).session
        return AsyncSession(self._conn, info, None, self._metadata)

    async def create_agent_type(
        self,
        agent_type_id: str,
        *,
        workspace: "Optional[config_pb2.WorkspaceConfig | Mapping[str, Any]]" = None,
        display_name: str = "",
        description: str = "",
        timeout: Optional[float] = None,
    ) -> config_pb2.AgentType:
        config = workspace if workspace is None or isinstance(workspace, config_pb2.WorkspaceConfig) else config_pb2.WorkspaceConfig(**workspace)
        request = config_pb2.CreateAgentTypeRequest(agent_type=config_pb2.AgentType(id=agent_type_id, display_name=display_name, description=description, workspace=config))
        return (await self._conn.unary(self._conn.config.CreateAgentType, request, self._metadata, timeout)).agent_type

    async def delete_agent_type(self, agent_type_id: str, *, timeout: Optional[float] = None) -> None:
        await self._conn.unary(self._conn.config.DeleteAgentType, config_pb2.DeleteAgentTypeRequest(id=agent_type_id), self._metadata, timeout)

    @property
    def channel(self) -> grpc.aio.Channel:
        return self._conn.channel

    @property
    def call_metadata(self) -> "list[Tuple[str, str]]":
        return list(self._metadata)
