"""The synchronous client over grpcio: ``AgentWorkspace``, ``Workspace``, ``Git``, ``Processes``, ``Session``."""
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union

import grpc

from . import _common as c
from ._gen.agentworkspace.v1 import (
    audit_pb2,
    audit_pb2_grpc,
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
from .streams import BashStream, GrepStream, Stream

R = TypeVar("R")

__all__ = ["AgentWorkspace", "Workspace", "Git", "Processes", "Session"]


class _Conn:
    """A channel, its stubs and the default deadline, shared by everything one client makes; and
    the connections to the other servers its calls were sent to (``follow``)."""

    def __init__(
        self, channel: grpc.Channel, timeout: Optional[float], url: str = "", make: Optional[Callable[[str], "_Conn"]] = None
    ) -> None:
        self.channel = channel
        self.timeout = timeout
        self.tools = tool_pb2_grpc.ToolServiceStub(channel)
        self.processes = process_pb2_grpc.ProcessServiceStub(channel)
        self.workspaces = workspace_pb2_grpc.WorkspaceServiceStub(channel)
        self.config = config_pb2_grpc.ConfigServiceStub(channel)
        self.audit = audit_pb2_grpc.AuditServiceStub(channel)
        self._url = url.rstrip("/")
        self._make = make
        self._others: Dict[str, "_Conn"] = {}
        self._names = c.method_names(self)

    def unary(self, method: Callable[..., R], request: Any, metadata: c.Metadata, timeout: Optional[float]) -> R:
        try:
            return method(request, timeout=self.timeout if timeout is None else timeout, metadata=metadata)
        except grpc.RpcError as err:
            error = from_rpc_error(err)
        # Refused because another server serves the workspace or session: sent there, once.
        there = c.redirected(self, error, method)
        if there is None:
            raise error
        try:
            return there(request, timeout=self.timeout if timeout is None else timeout, metadata=metadata)
        except grpc.RpcError as err:
            raise from_rpc_error(err) from None

    def stream(self, method: Callable[..., Any], request: Any, metadata: c.Metadata, timeout: Optional[float]) -> Any:
        # Errors (a refusal included) arrive from the first next(), through Stream.
        return method(request, timeout=self.timeout if timeout is None else timeout, metadata=metadata)

    def close(self) -> None:
        for other in self._others.values():
            other.close()
        self._others.clear()
        self.channel.close()


class Git:
    """The git tools of a workspace (``workspace.git``); the workspace's root must be a work tree."""

    def __init__(self, workspace: "Workspace") -> None:
        self._ws = workspace

    def status(self, *, timeout: Optional[float] = None) -> git_pb2.GitStatusResponse:
        """Branch, upstream, ahead/behind and each changed, staged or untracked file."""
        return self._ws._unary(self._ws._conn.tools.GitStatus, git_pb2.GitStatusRequest(workspace_id=self._ws.id), timeout)

    def diff(self, paths: Sequence[str] = (), *, ref: str = "", context_lines: Optional[int] = None, timeout: Optional[float] = None) -> git_pb2.GitDiffResponse:
        """The staged and unstaged diffs, or with ``ref`` the working tree against it."""
        return self._ws._unary(self._ws._conn.tools.GitDiff, c.git_diff_request(self._ws.id, paths, ref, context_lines), timeout)

    def commit(self, message: str, files: Sequence[str] = (), *, all: bool = False, timeout: Optional[float] = None) -> git_pb2.GitCommitResponse:
        """Stages exactly ``files`` (or every tracked change with ``all``) and commits them as the
        server's bot identity. Nothing to commit raises ``NothingToCommit``."""
        request = git_pb2.GitCommitRequest(workspace_id=self._ws.id, message=message, files=list(files), all=all)
        return self._ws._unary(self._ws._conn.tools.GitCommit, request, timeout)

    def checkout(self, branch: str, *, create: bool = False, timeout: Optional[float] = None) -> git_pb2.GitCheckoutResponse:
        """Switches to ``branch``, creating it at HEAD first with ``create``."""
        return self._ws._unary(self._ws._conn.tools.GitCheckout, git_pb2.GitCheckoutRequest(workspace_id=self._ws.id, branch=branch, create=create), timeout)

    def push(self, branch: str = "", *, force: bool = False, timeout: Optional[float] = None) -> git_pb2.GitPushResponse:
        """Pushes ``branch`` (default: the checked-out one) with a credential the workspace never sees."""
        return self._ws._unary(self._ws._conn.tools.GitPush, git_pb2.GitPushRequest(workspace_id=self._ws.id, branch=branch, force=force), timeout)


class Processes:
    """The background processes of a workspace (``workspace.processes``): long-lived commands (dev
    servers, watchers, REPLs) that keep running after the call that started them, and the ports
    they listen on, exposed through the server's proxy. Every call is the ``bash`` tool's
    (its permission, command policy and audit). Ended processes raise ``ProcessNotRunning`` to
    input and signals; an unknown id raises ``ProcessNotFound``."""

    def __init__(self, workspace: "Workspace") -> None:
        self._ws = workspace

    def start(
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
        """Starts ``bash -c command`` in the background and returns its handle at once (``process_id``,
        running). ``stdin`` keeps its stdin open for ``write``; ``pty=(rows, cols)`` runs it under a
        terminal of that size (its output is one stream, stdout). ``timeout_ms`` kills its tree
        after that long (0: no limit of its own)."""
        request = c.start_process_request(self._ws.id, command, workdir, env, stdin, pty, timeout_ms)
        return self._ws._unary(self._ws._conn.processes.StartProcess, request, timeout).process

    def list(self, *, timeout: Optional[float] = None) -> List[process_pb2.Process]:
        """The workspace's processes, running and ended (those still kept), oldest first."""
        return list(self._ws._unary(self._ws._conn.processes.ListProcesses, process_pb2.ListProcessesRequest(workspace_id=self._ws.id), timeout).processes)

    def get(self, process_id: str, *, timeout: Optional[float] = None) -> process_pb2.Process:
        """One process: running or how it ended (``exit_code``, ``signal``), its times and output totals."""
        request = process_pb2.GetProcessRequest(workspace_id=self._ws.id, process_id=process_id)
        return self._ws._unary(self._ws._conn.processes.GetProcess, request, timeout).process

    def read(self, process_id: str, *, stdout_offset: int = 0, stderr_offset: int = 0, max_bytes: int = 0, timeout: Optional[float] = None) -> process_pb2.ReadProcessOutputResponse:
        """The kept output from byte offsets in each stream, without waiting (``max_bytes`` of each,
        default and most 1 MiB); ``next_stdout_offset``/``next_stderr_offset`` continue it."""
        request = process_pb2.ReadProcessOutputRequest(
            workspace_id=self._ws.id, process_id=process_id, stdout_offset=stdout_offset, stderr_offset=stderr_offset, max_bytes=max_bytes
        )
        return self._ws._unary(self._ws._conn.processes.ReadProcessOutput, request, timeout)

    def attach(self, process_id: str, *, stdout_offset: int = 0, stderr_offset: int = 0, timeout: Optional[float] = None) -> "Stream[process_pb2.AttachProcessResponse]":
        """Follows the output from byte offsets: a stream of ``AttachProcessResponse`` events
        (``stdout``, ``stderr``, ``missed``) that ends with ``ended``, the process's final state.
        Cancelling the stream leaves the process running."""
        request = process_pb2.AttachProcessRequest(workspace_id=self._ws.id, process_id=process_id, stdout_offset=stdout_offset, stderr_offset=stderr_offset)
        return Stream(self._ws._conn.stream(self._ws._conn.processes.AttachProcess, request, self._ws._metadata, timeout), c.PassThrough())

    def write(self, process_id: str, data: Union[str, bytes], *, close: bool = False, timeout: Optional[float] = None) -> int:
        """Writes to the process's stdin (or its terminal; a str as UTF-8) and with ``close`` closes
        it after; returns the bytes written. Answers once the sandbox took them. A process started
        without ``stdin`` raises ``StdinClosed``."""
        request = process_pb2.WriteProcessStdinRequest(workspace_id=self._ws.id, process_id=process_id, data=c.stdin_bytes(data), close=close)
        return self._ws._unary(self._ws._conn.processes.WriteProcessStdin, request, timeout).bytes_written

    def close_stdin(self, process_id: str, *, timeout: Optional[float] = None) -> None:
        """Closes the process's stdin (with a pty: sends end-of-file)."""
        self.write(process_id, b"", close=True, timeout=timeout)

    def resize(self, process_id: str, rows: int, cols: int, *, timeout: Optional[float] = None) -> None:
        """Sets the size of the process's terminal (``NotATerminal`` without a ``pty``)."""
        request = process_pb2.ResizeProcessRequest(workspace_id=self._ws.id, process_id=process_id, size=process_pb2.TerminalSize(rows=rows, cols=cols))
        self._ws._unary(self._ws._conn.processes.ResizeProcess, request, timeout)

    def signal(self, process_id: str, signal: str, *, timeout: Optional[float] = None) -> None:
        """Sends a signal (``"TERM"``, ``"SIGINT"``, ``"KILL"``, …) to the process's whole tree."""
        request = process_pb2.SignalProcessRequest(workspace_id=self._ws.id, process_id=process_id, signal=signal)
        self._ws._unary(self._ws._conn.processes.SignalProcess, request, timeout)

    def wait(self, process_id: str, *, timeout_ms: int = 0, timeout: Optional[float] = None) -> process_pb2.WaitProcessResponse:
        """Waits until the process ends or ``timeout_ms`` passes (0: up to the call's deadline or
        the server's longest command timeout) and reports it; ``timed_out`` when it still runs."""
        request = process_pb2.WaitProcessRequest(workspace_id=self._ws.id, process_id=process_id, timeout_ms=timeout_ms)
        return self._ws._unary(self._ws._conn.processes.WaitProcess, request, timeout)

    def expose_port(self, port: int, *, timeout: Optional[float] = None) -> process_pb2.ExposePortResponse:
        """Makes a port the workspace listens on (on its own loopback) reachable through the server at
        ``port.path`` (``/ports/{workspace_id}/{port}/``), for callers with the session token or an
        operator key; ``listening`` says whether something accepts connections there yet. Exposing
        a port again is not an error."""
        return self._ws._unary(self._ws._conn.processes.ExposePort, process_pb2.ExposePortRequest(workspace_id=self._ws.id, port=port), timeout)

    def unexpose_port(self, port: int, *, timeout: Optional[float] = None) -> int:
        """Takes a port off the proxy; returns how many connections through it were closed."""
        request = process_pb2.UnexposePortRequest(workspace_id=self._ws.id, port=port)
        return self._ws._unary(self._ws._conn.processes.UnexposePort, request, timeout).closed_connections

    def list_exposed_ports(self, *, timeout: Optional[float] = None) -> List[process_pb2.ExposedPort]:
        """The workspace's exposed ports, lowest first."""
        return list(self._ws._unary(self._ws._conn.processes.ListExposedPorts, process_pb2.ListExposedPortsRequest(workspace_id=self._ws.id), timeout).ports)


class Workspace:
    """One workspace and the credential its tool calls carry.

    From ``client.workspace(id)``/``client.create_workspace()`` (the client's API key) or
    ``session.workspace`` (the session token; ``id`` is then empty and the server picks the
    session's workspace). Results are the generated response messages (``BashResponse``, …);
    failures raise the ``AgentWorkspaceError`` subclass of their reason. ``timeout`` is the call's
    deadline in seconds (default: the client's). Paths are relative to the workspace or absolute
    under ``/workspace``. Used as a context manager, a workspace made by ``create_workspace`` is
    deleted on exit.
    """

    def __init__(self, conn: _Conn, workspace_id: str, metadata: c.Metadata, *, info: Optional[workspace_pb2.Workspace] = None, owned: bool = False) -> None:
        self._conn = conn
        self._metadata = metadata
        self._owned = owned
        self.id = workspace_id
        #: The Workspace message from when it was made or last fetched (``refresh()``), if any.
        self.info = info
        self.git = Git(self)
        self.processes = Processes(self)

    def __repr__(self) -> str:
        return f"Workspace(id={self.id!r})" if self.id else "Workspace(<the session's workspace>)"

    def _unary(self, method: Callable[..., R], request: Any, timeout: Optional[float]) -> R:
        return self._conn.unary(method, request, self._metadata, timeout)

    def __enter__(self) -> "Workspace":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._owned:
            self.delete_workspace()

    # --- the workspace itself -------------------------------------------------------------------

    def refresh(self, *, timeout: Optional[float] = None) -> workspace_pb2.Workspace:
        """Fetches the workspace (GetWorkspace; an operator call) and keeps it as ``info``."""
        self.info = self._unary(self._conn.workspaces.GetWorkspace, workspace_pb2.GetWorkspaceRequest(id=self.id), timeout).workspace
        return self.info

    def delete_workspace(self, *, timeout: Optional[float] = None) -> None:
        """Stops everything running in the workspace and removes it (DeleteWorkspace)."""
        self._unary(self._conn.workspaces.DeleteWorkspace, workspace_pb2.DeleteWorkspaceRequest(id=self.id), timeout)
        self._owned = False

    # --- commands -------------------------------------------------------------------------------

    def bash(
        self,
        command: str,
        *,
        workdir: str = "",
        env: Optional[Mapping[str, str]] = None,
        command_timeout: Optional[float] = None,
        timeout: Optional[float] = None,
    ) -> tool_pb2.BashResponse:
        """Runs ``bash -c command`` and returns its output (each stream cut at 50 KiB) and exit code;
        a non-zero exit is a result, not an error. ``command_timeout`` (seconds; default the
        server's, 120) kills the command and raises ``CommandTimeout`` with its
        ``partial_output``; ``timeout`` is the call's deadline, which stops it as well."""
        return self._unary(self._conn.tools.Bash, c.bash_request(self.id, command, workdir, env, command_timeout), timeout)

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
    ) -> BashStream:
        """Runs a command and returns its output as it comes: an iterator of ``OutputChunk``s
        with ``exited`` set at the end (see ``BashStream``). Cancel it (``close()``, ``cancel()``,
        leaving its ``with`` block) and the server kills the command."""
        request = c.stream_bash_request(self.id, command, workdir, env, command_timeout, max_output_bytes)
        return BashStream(self._conn.stream(self._conn.tools.StreamBash, request, self._metadata, timeout), encoding, errors)

    # --- files ----------------------------------------------------------------------------------

    def read(self, path: str, *, offset: int = 0, limit: int = 0, timeout: Optional[float] = None) -> tool_pb2.ReadFileResponse:
        """A text file as ``N: `` numbered lines (``offset`` 1-indexed, ``limit`` default 2000), a
        directory's entries, or a binary file's size and MIME type."""
        return self._unary(self._conn.tools.ReadFile, tool_pb2.ReadFileRequest(workspace_id=self.id, path=path, offset=offset, limit=limit), timeout)

    def write(self, path: str, content: str, *, timeout: Optional[float] = None) -> tool_pb2.WriteFileResponse:
        """Creates or atomically replaces a file, making its parent directories."""
        return self._unary(self._conn.tools.WriteFile, tool_pb2.WriteFileRequest(workspace_id=self.id, path=path, content=content), timeout)

    def edit(self, path: str, old_string: str, new_string: str, *, replace_all: bool = False, timeout: Optional[float] = None) -> tool_pb2.EditFileResponse:
        """Replaces the exact ``old_string``, which must occur once (``FindNotUnique`` otherwise)
        unless ``replace_all``; absent, ``FindNotFound`` carries the ``closest_match``."""
        request = tool_pb2.EditFileRequest(workspace_id=self.id, path=path, old_string=old_string, new_string=new_string, replace_all=replace_all)
        return self._unary(self._conn.tools.EditFile, request, timeout)

    def patch(self, path: str, patches: Iterable[c.PatchLike], *, timeout: Optional[float] = None) -> tool_pb2.PatchFileResponse:
        """Applies ``(find, replace)`` pairs (or ``Patch`` messages) in order, all or nothing."""
        return self._unary(self._conn.tools.PatchFile, tool_pb2.PatchFileRequest(workspace_id=self.id, path=path, patches=c.patches(patches)), timeout)

    def delete(self, path: str, *, timeout: Optional[float] = None) -> None:
        """Deletes a file or symlink (never a directory, never a link's target)."""
        self._unary(self._conn.tools.DeleteFile, tool_pb2.DeleteFileRequest(workspace_id=self.id, path=path), timeout)

    def list(self, path: str = "", *, pattern: str = "", names_only: bool = False, timeout: Optional[float] = None) -> tool_pb2.ListFilesResponse:
        """A directory's entries, or with ``pattern`` (``**/*.py``) every matching file below it.
        ``names_only``: each entry's path and type alone, the cheap listing."""
        return self._unary(self._conn.tools.ListFiles, tool_pb2.ListFilesRequest(workspace_id=self.id, path=path, pattern=pattern, names_only=names_only), timeout)

    def glob(self, pattern: str, *, path: str = "", limit: int = 0, timeout: Optional[float] = None) -> tool_pb2.GlobResponse:
        """Files matching ``pattern``, newest modification first."""
        return self._unary(self._conn.tools.Glob, tool_pb2.GlobRequest(workspace_id=self.id, pattern=pattern, path=path, limit=limit), timeout)

    def grep(
        self,
        pattern: str,
        *,
        path: str = "",
        glob: str = "",
        case_sensitive: Optional[bool] = None,
        context_lines: int = 0,
        max_results: int = 0,
        timeout: Optional[float] = None,
    ) -> tool_pb2.GrepResponse:
        """ripgrep's matches of a regular expression (``max_results`` default 100, ``truncated``)."""
        request = tool_pb2.GrepRequest(workspace_id=self.id, **c.grep_fields(pattern, path, glob, case_sensitive, context_lines, max_results))
        return self._unary(self._conn.tools.Grep, request, timeout)

    def stream_grep(
        self,
        pattern: str,
        *,
        path: str = "",
        glob: str = "",
        case_sensitive: Optional[bool] = None,
        context_lines: int = 0,
        max_results: int = 0,
        timeout: Optional[float] = None,
    ) -> GrepStream:
        """Like ``grep``, the matches as ripgrep finds them (``GrepStream``; ``done`` at the end)."""
        request = tool_pb2.StreamGrepRequest(workspace_id=self.id, **c.grep_fields(pattern, path, glob, case_sensitive, context_lines, max_results))
        return GrepStream(self._conn.stream(self._conn.tools.StreamGrep, request, self._metadata, timeout))


class Session:
    """An agent session: its id, its token (never printed), and its workspace.

    As a context manager it ends the session on exit (EndSession, with the client's API key): the
    token stops working and the workspace is removed.
    """

    def __init__(self, conn: _Conn, info: workspace_pb2.Session, token: Optional[str], operator: c.Metadata) -> None:
        self._conn = conn
        self._token = token
        self._operator = operator
        #: The session as last seen (StartSession's answer, then ``refresh()``/``wait_ready()``/``end()``).
        self.info = info
        self.id = info.id
        self.workspace = Workspace(conn, "", c.bearer(token)) if token else Workspace(conn, info.workspace_id, operator)

    @property
    def token(self) -> Optional[str]:
        """The session token (``Bearer`` credential of its tool calls); None for a session looked up by id."""
        return self._token

    @property
    def status(self) -> int:
        return self.info.status

    def __repr__(self) -> str:
        return f"Session(id={self.id!r}, status={workspace_pb2.SessionStatus.Name(self.info.status)})"

    def _reader(self) -> c.Metadata:
        return c.bearer(self._token) if self._token else self._operator

    def refresh(self, *, timeout: Optional[float] = None) -> workspace_pb2.Session:
        """Fetches the session (GetSession)."""
        self.info = self._conn.unary(self._conn.workspaces.GetSession, workspace_pb2.GetSessionRequest(id=self.id), self._reader(), timeout).session
        return self.info

    def events(self, *, follow: bool = False, timeout: Optional[float] = None) -> "Stream[workspace_pb2.WatchSessionResponse]":
        """WatchSession: the events so far, then each as it happens (stages, their output,
        warnings, status changes); ends once provisioning is over, or with ``follow`` once the
        session has ended."""
        call = self._conn.stream(self._conn.workspaces.WatchSession, workspace_pb2.WatchSessionRequest(id=self.id, follow=follow), self._reader(), timeout)
        return Stream(call, c.PassThrough())

    def wait_ready(self, *, timeout: Optional[float] = None) -> workspace_pb2.Session:
        """Waits until provisioning is over and returns the session: status ``ACTIVE`` (ready), or
        ``DEGRADED`` (no workspace; ``status_message`` says why). ``timeout`` bounds the wait."""
        with self.events(timeout=timeout) as events:
            for _ in events:
                pass
        return self.refresh(timeout=timeout)

    def post_message(self, text: str, *, summary: bool = False, timeout: Optional[float] = None) -> audit_pb2.PostAgentMessageResponse:
        """Posts the agent's own words into the session's chain (PostAgentMessage): a note, or with
        ``summary=True`` its closing summary. People watching see it in order with the tool calls.
        Sent with the session's token when the session has one, else as the operator."""
        kind = audit_pb2.AGENT_MESSAGE_KIND_SUMMARY if summary else audit_pb2.AGENT_MESSAGE_KIND_NOTE
        request = audit_pb2.PostAgentMessageRequest(session_id="" if self._token else self.id, kind=kind, text=text)
        return self._conn.unary(self._conn.audit.PostAgentMessage, request, self._reader(), timeout)

    def end(self, *, timeout: Optional[float] = None) -> workspace_pb2.Session:
        """Ends the session (EndSession, an operator call); ending an ended one changes nothing."""
        self.info = self._conn.unary(self._conn.workspaces.EndSession, workspace_pb2.EndSessionRequest(id=self.id), self._operator, timeout).session
        return self.info

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is None:
            self.end()
            return
        try:  # never hide the exception that left the block
            self.end()
        except Exception:
            pass


class AgentWorkspace:
    """A connection to an agent-workspace server.

    ``url`` is ``http://host:port`` (plaintext, HTTP/2 prior knowledge) or ``https://host[:port]``
    (TLS, the system's roots unless ``root_certificates``). ``api_key`` is an operator key
    (``AGENT_WORKSPACE_API_KEYS``); ``session_token`` a session's token, for an agent that has only
    that (``client.workspace()`` is then its session's workspace). ``timeout`` is the default
    deadline of every call in seconds (None: none). A unary call refused because another server
    sharing the database serves the workspace or session (``WorkspaceServedElsewhere``) is sent once
    to the server it names, unless ``follow_redirects=False`` (streams raise it). Close it, or use
    it as a context manager.
    """

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

        def channel_to(u: str) -> grpc.Channel:
            target, secure = c.parse_url(u)
            if secure:
                return grpc.secure_channel(target, grpc.ssl_channel_credentials(root_certificates), options=options)
            return grpc.insecure_channel(target, options=options)

        def make(u: str) -> _Conn:
            return _Conn(channel_to(u), timeout, u, make)

        self.url = url
        self._conn = _Conn(channel_to(url), timeout, url, make if follow_redirects else None)
        self._metadata = c.bearer(api_key or session_token)

    def __repr__(self) -> str:
        return f"AgentWorkspace(url={self.url!r})"

    def close(self) -> None:
        """Closes the channel (and those to other servers calls were sent to); calls still running are cancelled."""
        self._conn.close()

    def __enter__(self) -> "AgentWorkspace":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- workspaces -----------------------------------------------------------------------------

    def workspace(self, workspace_id: str = "") -> Workspace:
        """A handle on an existing workspace (no call is made). With a session token and no id:
        the session's workspace."""
        return Workspace(self._conn, workspace_id, self._metadata)

    def create_workspace(
        self,
        *,
        provider: str = "",
        agent_type: str = "",
        labels: Optional[Mapping[str, str]] = None,
        image: str = "",
        limits: Optional[workspace_pb2.ResourceLimits] = None,
        mounts: Sequence[workspace_pb2.HostMount] = (),
        timeout: Optional[float] = None,
    ) -> Workspace:
        """Makes a workspace (CreateWorkspace) and returns it once it runs tools; as a context
        manager it is deleted on exit."""
        request = workspace_pb2.CreateWorkspaceRequest(provider=provider, agent_type=agent_type, labels=dict(labels or {}), image=image, limits=limits, mounts=list(mounts))
        info = self._conn.unary(self._conn.workspaces.CreateWorkspace, request, self._metadata, timeout).workspace
        return Workspace(self._conn, info.id, self._metadata, info=info, owned=True)

    def list_workspaces(
        self, *, provider: str = "", labels: Optional[Mapping[str, str]] = None, page_size: int = 0, page_token: str = "", timeout: Optional[float] = None
    ) -> workspace_pb2.ListWorkspacesResponse:
        """One page of workspaces, newest first (``next_page_token`` continues)."""
        request = workspace_pb2.ListWorkspacesRequest(provider=provider, labels=dict(labels or {}), page_size=page_size, page_token=page_token)
        return self._conn.unary(self._conn.workspaces.ListWorkspaces, request, self._metadata, timeout)

    def delete_workspace(self, workspace_id: str, *, timeout: Optional[float] = None) -> None:
        """Removes a workspace and everything running in it."""
        self._conn.unary(self._conn.workspaces.DeleteWorkspace, workspace_pb2.DeleteWorkspaceRequest(id=workspace_id), self._metadata, timeout)

    # --- sessions -------------------------------------------------------------------------------

    def start_session(
        self,
        agent_type: str,
        *,
        task: Optional[c.TaskLike] = None,
        labels: Optional[Mapping[str, str]] = None,
        mounts: Sequence[workspace_pb2.HostMount] = (),
        workspace_id: str = "",
        timeout: Optional[float] = None,
    ) -> Session:
        """Starts a session of ``agent_type`` (StartSession) and returns it at once, usually
        ``PROVISIONING``: ``wait_ready()`` waits for its workspace (tool calls made before wait on
        their own). ``task`` is a ``TaskContext`` or a dict of its fields (``repository_url``,
        ``branch``, ``pull_request_number``, ``base_branch``); ``workspace_id`` joins another live
        session's workspace. Use it as a context manager to end it."""
        request = workspace_pb2.StartSessionRequest(agent_type=agent_type, task=c.task_context(task), labels=dict(labels or {}), mounts=list(mounts), workspace_id=workspace_id)
        response = self._conn.unary(self._conn.workspaces.StartSession, request, self._metadata, timeout)
        return Session(self._conn, response.session, response.session_token, self._metadata)

    def session(self, session_id: str = "", *, timeout: Optional[float] = None) -> Session:
        """An existing session, fetched (GetSession). With a session token and no id: its own."""
        info = self._conn.unary(self._conn.workspaces.GetSession, workspace_pb2.GetSessionRequest(id=session_id), self._metadata, timeout).session
        return Session(self._conn, info, None, self._metadata)

    def list_sessions(
        self, *, agent_type: str = "", status: int = 0, page_size: int = 0, page_token: str = "", timeout: Optional[float] = None
    ) -> workspace_pb2.ListSessionsResponse:
        """One page of sessions, newest first."""
        request = workspace_pb2.ListSessionsRequest(agent_type=agent_type, status=status, page_size=page_size, page_token=page_token)
        return self._conn.unary(self._conn.workspaces.ListSessions, request, self._metadata, timeout)

    # --- agent types ----------------------------------------------------------------------------

    def create_agent_type(
        self,
        agent_type_id: str,
        *,
        workspace: "Optional[config_pb2.WorkspaceConfig | Mapping[str, Any]]" = None,
        display_name: str = "",
        description: str = "",
        timeout: Optional[float] = None,
    ) -> config_pb2.AgentType:
        """Creates an agent type; ``workspace`` is its ``WorkspaceConfig`` or a dict of its fields
        (``{"enabled": True, "tools": ["bash", "read"], "command_policy": {"allow": ["git"]}}``)."""
        config = workspace if workspace is None or isinstance(workspace, config_pb2.WorkspaceConfig) else config_pb2.WorkspaceConfig(**workspace)
        request = config_pb2.CreateAgentTypeRequest(agent_type=config_pb2.AgentType(id=agent_type_id, display_name=display_name, description=description, workspace=config))
        return self._conn.unary(self._conn.config.CreateAgentType, request, self._metadata, timeout).agent_type

    def get_agent_type(self, agent_type_id: str, *, timeout: Optional[float] = None) -> config_pb2.AgentType:
        return self._conn.unary(self._conn.config.GetAgentType, config_pb2.GetAgentTypeRequest(id=agent_type_id), self._metadata, timeout).agent_type

    def delete_agent_type(self, agent_type_id: str, *, timeout: Optional[float] = None) -> None:
        self._conn.unary(self._conn.config.DeleteAgentType, config_pb2.DeleteAgentTypeRequest(id=agent_type_id), self._metadata, timeout)

    # --- everything else ------------------------------------------------------------------------

    @property
    def channel(self) -> grpc.Channel:
        """The grpcio channel, for the generated stubs of RPCs this class does not wrap (pass
        ``metadata=client.call_metadata``)."""
        return self._conn.channel

    @property
    def call_metadata(self) -> List[Tuple[str, str]]:
        """The metadata carrying this client's credential."""
        return list(self._metadata)
