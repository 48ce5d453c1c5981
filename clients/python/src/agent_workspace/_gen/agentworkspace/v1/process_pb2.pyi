from . import options_pb2 as _options_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
PROCESS_STATE_EXITED: ProcessState
PROCESS_STATE_LOST: ProcessState
PROCESS_STATE_RUNNING: ProcessState
PROCESS_STATE_UNSPECIFIED: ProcessState

class AttachProcessRequest(_message.Message):
    __slots__ = ["process_id", "stderr_offset", "stdout_offset", "workspace_id"]
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    STDERR_OFFSET_FIELD_NUMBER: _ClassVar[int]
    STDOUT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    process_id: str
    stderr_offset: int
    stdout_offset: int
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., process_id: _Optional[str] = ..., stdout_offset: _Optional[int] = ..., stderr_offset: _Optional[int] = ...) -> None: ...

class AttachProcessResponse(_message.Message):
    __slots__ = ["ended", "missed", "stderr", "stdout"]
    ENDED_FIELD_NUMBER: _ClassVar[int]
    MISSED_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    ended: Process
    missed: ProcessOutputMissed
    stderr: ProcessOutput
    stdout: ProcessOutput
    def __init__(self, stdout: _Optional[_Union[ProcessOutput, _Mapping]] = ..., stderr: _Optional[_Union[ProcessOutput, _Mapping]] = ..., missed: _Optional[_Union[ProcessOutputMissed, _Mapping]] = ..., ended: _Optional[_Union[Process, _Mapping]] = ...) -> None: ...

class ExposePortRequest(_message.Message):
    __slots__ = ["port", "workspace_id"]
    PORT_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    port: int
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., port: _Optional[int] = ...) -> None: ...

class ExposePortResponse(_message.Message):
    __slots__ = ["listening", "port"]
    LISTENING_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    listening: bool
    port: ExposedPort
    def __init__(self, port: _Optional[_Union[ExposedPort, _Mapping]] = ..., listening: bool = ...) -> None: ...

class ExposedPort(_message.Message):
    __slots__ = ["exposed_at", "open_connections", "path", "port"]
    EXPOSED_AT_FIELD_NUMBER: _ClassVar[int]
    OPEN_CONNECTIONS_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    exposed_at: _timestamp_pb2.Timestamp
    open_connections: int
    path: str
    port: int
    def __init__(self, port: _Optional[int] = ..., path: _Optional[str] = ..., exposed_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., open_connections: _Optional[int] = ...) -> None: ...

class GetProcessRequest(_message.Message):
    __slots__ = ["process_id", "workspace_id"]
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    process_id: str
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., process_id: _Optional[str] = ...) -> None: ...

class GetProcessResponse(_message.Message):
    __slots__ = ["process"]
    PROCESS_FIELD_NUMBER: _ClassVar[int]
    process: Process
    def __init__(self, process: _Optional[_Union[Process, _Mapping]] = ...) -> None: ...

class ListExposedPortsRequest(_message.Message):
    __slots__ = ["workspace_id"]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ...) -> None: ...

class ListExposedPortsResponse(_message.Message):
    __slots__ = ["ports"]
    PORTS_FIELD_NUMBER: _ClassVar[int]
    ports: _containers.RepeatedCompositeFieldContainer[ExposedPort]
    def __init__(self, ports: _Optional[_Iterable[_Union[ExposedPort, _Mapping]]] = ...) -> None: ...

class ListProcessesRequest(_message.Message):
    __slots__ = ["workspace_id"]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ...) -> None: ...

class ListProcessesResponse(_message.Message):
    __slots__ = ["processes"]
    PROCESSES_FIELD_NUMBER: _ClassVar[int]
    processes: _containers.RepeatedCompositeFieldContainer[Process]
    def __init__(self, processes: _Optional[_Iterable[_Union[Process, _Mapping]]] = ...) -> None: ...

class Process(_message.Message):
    __slots__ = ["command", "ended_at", "ended_by", "exit_code", "oom_killed", "pid", "process_id", "pty", "signal", "started_at", "state", "stderr_dropped_bytes", "stderr_total_bytes", "stdin_open", "stdout_dropped_bytes", "stdout_total_bytes", "workdir", "workspace_id"]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_BY_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    OOM_KILLED_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    PTY_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STDERR_DROPPED_BYTES_FIELD_NUMBER: _ClassVar[int]
    STDERR_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    STDIN_OPEN_FIELD_NUMBER: _ClassVar[int]
    STDOUT_DROPPED_BYTES_FIELD_NUMBER: _ClassVar[int]
    STDOUT_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    WORKDIR_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    command: str
    ended_at: _timestamp_pb2.Timestamp
    ended_by: str
    exit_code: int
    oom_killed: bool
    pid: int
    process_id: str
    pty: bool
    signal: str
    started_at: _timestamp_pb2.Timestamp
    state: ProcessState
    stderr_dropped_bytes: int
    stderr_total_bytes: int
    stdin_open: bool
    stdout_dropped_bytes: int
    stdout_total_bytes: int
    workdir: str
    workspace_id: str
    def __init__(self, process_id: _Optional[str] = ..., workspace_id: _Optional[str] = ..., pid: _Optional[int] = ..., command: _Optional[str] = ..., workdir: _Optional[str] = ..., pty: bool = ..., stdin_open: bool = ..., state: _Optional[_Union[ProcessState, str]] = ..., exit_code: _Optional[int] = ..., signal: _Optional[str] = ..., oom_killed: bool = ..., started_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., ended_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., stdout_total_bytes: _Optional[int] = ..., stderr_total_bytes: _Optional[int] = ..., stdout_dropped_bytes: _Optional[int] = ..., stderr_dropped_bytes: _Optional[int] = ..., ended_by: _Optional[str] = ...) -> None: ...

class ProcessOutput(_message.Message):
    __slots__ = ["data", "offset"]
    DATA_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    offset: int
    def __init__(self, data: _Optional[bytes] = ..., offset: _Optional[int] = ...) -> None: ...

class ProcessOutputMissed(_message.Message):
    __slots__ = ["bytes", "stderr"]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    bytes: int
    stderr: bool
    def __init__(self, stderr: bool = ..., bytes: _Optional[int] = ...) -> None: ...

class ReadProcessOutputRequest(_message.Message):
    __slots__ = ["max_bytes", "process_id", "stderr_offset", "stdout_offset", "workspace_id"]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    STDERR_OFFSET_FIELD_NUMBER: _ClassVar[int]
    STDOUT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    max_bytes: int
    process_id: str
    stderr_offset: int
    stdout_offset: int
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., process_id: _Optional[str] = ..., stdout_offset: _Optional[int] = ..., stderr_offset: _Optional[int] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class ReadProcessOutputResponse(_message.Message):
    __slots__ = ["next_stderr_offset", "next_stdout_offset", "process", "stderr", "stderr_missed_bytes", "stderr_offset", "stdout", "stdout_missed_bytes", "stdout_offset"]
    NEXT_STDERR_OFFSET_FIELD_NUMBER: _ClassVar[int]
    NEXT_STDOUT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    PROCESS_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    STDERR_MISSED_BYTES_FIELD_NUMBER: _ClassVar[int]
    STDERR_OFFSET_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDOUT_MISSED_BYTES_FIELD_NUMBER: _ClassVar[int]
    STDOUT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    next_stderr_offset: int
    next_stdout_offset: int
    process: Process
    stderr: bytes
    stderr_missed_bytes: int
    stderr_offset: int
    stdout: bytes
    stdout_missed_bytes: int
    stdout_offset: int
    def __init__(self, stdout: _Optional[bytes] = ..., stderr: _Optional[bytes] = ..., stdout_offset: _Optional[int] = ..., stderr_offset: _Optional[int] = ..., stdout_missed_bytes: _Optional[int] = ..., stderr_missed_bytes: _Optional[int] = ..., next_stdout_offset: _Optional[int] = ..., next_stderr_offset: _Optional[int] = ..., process: _Optional[_Union[Process, _Mapping]] = ...) -> None: ...

class ResizeProcessRequest(_message.Message):
    __slots__ = ["process_id", "size", "workspace_id"]
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    process_id: str
    size: TerminalSize
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., process_id: _Optional[str] = ..., size: _Optional[_Union[TerminalSize, _Mapping]] = ...) -> None: ...

class ResizeProcessResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class SignalProcessRequest(_message.Message):
    __slots__ = ["process_id", "signal", "workspace_id"]
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    process_id: str
    signal: str
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., process_id: _Optional[str] = ..., signal: _Optional[str] = ...) -> None: ...

class SignalProcessResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class StartProcessRequest(_message.Message):
    __slots__ = ["command", "env", "pty", "stdin", "timeout_ms", "workdir", "workspace_id"]
    class EnvEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    PTY_FIELD_NUMBER: _ClassVar[int]
    STDIN_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    WORKDIR_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    command: str
    env: _containers.ScalarMap[str, str]
    pty: TerminalSize
    stdin: bool
    timeout_ms: int
    workdir: str
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., command: _Optional[str] = ..., workdir: _Optional[str] = ..., env: _Optional[_Mapping[str, str]] = ..., pty: _Optional[_Union[TerminalSize, _Mapping]] = ..., stdin: bool = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class StartProcessResponse(_message.Message):
    __slots__ = ["process"]
    PROCESS_FIELD_NUMBER: _ClassVar[int]
    process: Process
    def __init__(self, process: _Optional[_Union[Process, _Mapping]] = ...) -> None: ...

class TerminalSize(_message.Message):
    __slots__ = ["cols", "rows"]
    COLS_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    cols: int
    rows: int
    def __init__(self, rows: _Optional[int] = ..., cols: _Optional[int] = ...) -> None: ...

class UnexposePortRequest(_message.Message):
    __slots__ = ["port", "workspace_id"]
    PORT_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    port: int
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., port: _Optional[int] = ...) -> None: ...

class UnexposePortResponse(_message.Message):
    __slots__ = ["closed_connections"]
    CLOSED_CONNECTIONS_FIELD_NUMBER: _ClassVar[int]
    closed_connections: int
    def __init__(self, closed_connections: _Optional[int] = ...) -> None: ...

class WaitProcessRequest(_message.Message):
    __slots__ = ["process_id", "timeout_ms", "workspace_id"]
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    process_id: str
    timeout_ms: int
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., process_id: _Optional[str] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class WaitProcessResponse(_message.Message):
    __slots__ = ["process", "timed_out"]
    PROCESS_FIELD_NUMBER: _ClassVar[int]
    TIMED_OUT_FIELD_NUMBER: _ClassVar[int]
    process: Process
    timed_out: bool
    def __init__(self, process: _Optional[_Union[Process, _Mapping]] = ..., timed_out: bool = ...) -> None: ...

class WriteProcessStdinRequest(_message.Message):
    __slots__ = ["close", "data", "process_id", "text", "workspace_id"]
    CLOSE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    close: bool
    data: bytes
    process_id: str
    text: str
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., process_id: _Optional[str] = ..., data: _Optional[bytes] = ..., close: bool = ..., text: _Optional[str] = ...) -> None: ...

class WriteProcessStdinResponse(_message.Message):
    __slots__ = ["bytes_written"]
    BYTES_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    bytes_written: int
    def __init__(self, bytes_written: _Optional[int] = ...) -> None: ...

class ProcessState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
