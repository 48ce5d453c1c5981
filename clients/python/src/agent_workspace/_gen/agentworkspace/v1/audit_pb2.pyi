from . import errors_pb2 as _errors_pb2
from . import workspace_pb2 as _workspace_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

AGENT_MESSAGE_KIND_NOTE: AgentMessageKind
AGENT_MESSAGE_KIND_SUMMARY: AgentMessageKind
AGENT_MESSAGE_KIND_UNSPECIFIED: AgentMessageKind
AUDIT_OUTCOME_CANCELLED: AuditOutcome
AUDIT_OUTCOME_DENIED: AuditOutcome
AUDIT_OUTCOME_ERROR: AuditOutcome
AUDIT_OUTCOME_OK: AuditOutcome
AUDIT_OUTCOME_UNSPECIFIED: AuditOutcome
DESCRIPTOR: _descriptor.FileDescriptor
FILE_CHANGE_KIND_CREATED: FileChangeKind
FILE_CHANGE_KIND_DELETED: FileChangeKind
FILE_CHANGE_KIND_MODIFIED: FileChangeKind
FILE_CHANGE_KIND_UNSPECIFIED: FileChangeKind

class AgentMessage(_message.Message):
    __slots__ = ["kind", "text"]
    KIND_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    kind: AgentMessageKind
    text: str
    def __init__(self, kind: _Optional[_Union[AgentMessageKind, str]] = ..., text: _Optional[str] = ...) -> None: ...

class AgentMessagePosted(_message.Message):
    __slots__ = ["event"]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    event: AuditEvent
    def __init__(self, event: _Optional[_Union[AuditEvent, _Mapping]] = ...) -> None: ...

class AuditEvent(_message.Message):
    __slots__ = ["agent_message", "agent_type", "code", "duration", "exit_code", "name", "outcome", "parent_span_id", "principal_id", "principal_kind", "procedure", "protocol", "provider", "reason", "request", "result", "session_id", "span_id", "start_time", "tool", "tool_call_id", "trace_id", "truncated", "workspace_id"]
    class RequestEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class ResultEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    AGENT_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    AGENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    PARENT_SPAN_ID_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_ID_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_KIND_FIELD_NUMBER: _ClassVar[int]
    PROCEDURE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SPAN_ID_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    agent_message: AgentMessage
    agent_type: str
    code: str
    duration: _duration_pb2.Duration
    exit_code: int
    name: str
    outcome: AuditOutcome
    parent_span_id: str
    principal_id: str
    principal_kind: str
    procedure: str
    protocol: str
    provider: str
    reason: _errors_pb2.ErrorReason
    request: _containers.ScalarMap[str, str]
    result: _containers.ScalarMap[str, str]
    session_id: str
    span_id: str
    start_time: _timestamp_pb2.Timestamp
    tool: str
    tool_call_id: str
    trace_id: str
    truncated: bool
    workspace_id: str
    def __init__(self, trace_id: _Optional[str] = ..., span_id: _Optional[str] = ..., parent_span_id: _Optional[str] = ..., name: _Optional[str] = ..., tool: _Optional[str] = ..., procedure: _Optional[str] = ..., tool_call_id: _Optional[str] = ..., workspace_id: _Optional[str] = ..., session_id: _Optional[str] = ..., agent_type: _Optional[str] = ..., principal_kind: _Optional[str] = ..., principal_id: _Optional[str] = ..., provider: _Optional[str] = ..., protocol: _Optional[str] = ..., start_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., duration: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., outcome: _Optional[_Union[AuditOutcome, str]] = ..., code: _Optional[str] = ..., reason: _Optional[_Union[_errors_pb2.ErrorReason, str]] = ..., request: _Optional[_Mapping[str, str]] = ..., result: _Optional[_Mapping[str, str]] = ..., exit_code: _Optional[int] = ..., truncated: bool = ..., agent_message: _Optional[_Union[AgentMessage, _Mapping]] = ...) -> None: ...

class EventsDropped(_message.Message):
    __slots__ = ["count"]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    count: int
    def __init__(self, count: _Optional[int] = ...) -> None: ...

class FileChanged(_message.Message):
    __slots__ = ["change", "path", "session_id", "span_id", "tool", "tree_changed", "workspace_id"]
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SPAN_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    TREE_CHANGED_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    change: FileChangeKind
    path: str
    session_id: str
    span_id: str
    tool: str
    tree_changed: bool
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., session_id: _Optional[str] = ..., path: _Optional[str] = ..., tool: _Optional[str] = ..., span_id: _Optional[str] = ..., change: _Optional[_Union[FileChangeKind, str]] = ..., tree_changed: bool = ...) -> None: ...

class ListAuditEventsRequest(_message.Message):
    __slots__ = ["agent_type", "end_time", "outcome", "page_size", "page_token", "session_id", "start_time", "tool", "workspace_id"]
    AGENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    agent_type: str
    end_time: _timestamp_pb2.Timestamp
    outcome: AuditOutcome
    page_size: int
    page_token: str
    session_id: str
    start_time: _timestamp_pb2.Timestamp
    tool: str
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., session_id: _Optional[str] = ..., agent_type: _Optional[str] = ..., tool: _Optional[str] = ..., outcome: _Optional[_Union[AuditOutcome, str]] = ..., start_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListAuditEventsResponse(_message.Message):
    __slots__ = ["events", "next_page_token"]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[AuditEvent]
    next_page_token: str
    def __init__(self, events: _Optional[_Iterable[_Union[AuditEvent, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class PostAgentMessageRequest(_message.Message):
    __slots__ = ["kind", "session_id", "text"]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    kind: AgentMessageKind
    session_id: str
    text: str
    def __init__(self, session_id: _Optional[str] = ..., kind: _Optional[_Union[AgentMessageKind, str]] = ..., text: _Optional[str] = ...) -> None: ...

class PostAgentMessageResponse(_message.Message):
    __slots__ = ["session_id", "span_id", "workspace_id"]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SPAN_ID_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    span_id: str
    workspace_id: str
    def __init__(self, session_id: _Optional[str] = ..., span_id: _Optional[str] = ..., workspace_id: _Optional[str] = ...) -> None: ...

class SessionStatusEvent(_message.Message):
    __slots__ = ["agent_type", "message", "session_id", "status", "workspace_id"]
    AGENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    agent_type: str
    message: str
    session_id: str
    status: _workspace_pb2.SessionStatus
    workspace_id: str
    def __init__(self, session_id: _Optional[str] = ..., agent_type: _Optional[str] = ..., status: _Optional[_Union[_workspace_pb2.SessionStatus, str]] = ..., message: _Optional[str] = ..., workspace_id: _Optional[str] = ...) -> None: ...

class ToolCallFinished(_message.Message):
    __slots__ = ["call"]
    CALL_FIELD_NUMBER: _ClassVar[int]
    call: AuditEvent
    def __init__(self, call: _Optional[_Union[AuditEvent, _Mapping]] = ...) -> None: ...

class ToolCallStarted(_message.Message):
    __slots__ = ["call"]
    CALL_FIELD_NUMBER: _ClassVar[int]
    call: AuditEvent
    def __init__(self, call: _Optional[_Union[AuditEvent, _Mapping]] = ...) -> None: ...

class WatchEventsRequest(_message.Message):
    __slots__ = ["session_id", "workspace_id"]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., session_id: _Optional[str] = ...) -> None: ...

class WatchEventsResponse(_message.Message):
    __slots__ = ["agent_message", "events_dropped", "file_changed", "session_status", "started", "time", "tool_call_finished", "tool_call_started", "workspace_status"]
    AGENT_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    EVENTS_DROPPED_FIELD_NUMBER: _ClassVar[int]
    FILE_CHANGED_FIELD_NUMBER: _ClassVar[int]
    SESSION_STATUS_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_FINISHED_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_STARTED_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_STATUS_FIELD_NUMBER: _ClassVar[int]
    agent_message: AgentMessagePosted
    events_dropped: EventsDropped
    file_changed: FileChanged
    session_status: SessionStatusEvent
    started: WatchStarted
    time: _timestamp_pb2.Timestamp
    tool_call_finished: ToolCallFinished
    tool_call_started: ToolCallStarted
    workspace_status: WorkspaceStatusEvent
    def __init__(self, time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., started: _Optional[_Union[WatchStarted, _Mapping]] = ..., tool_call_started: _Optional[_Union[ToolCallStarted, _Mapping]] = ..., tool_call_finished: _Optional[_Union[ToolCallFinished, _Mapping]] = ..., file_changed: _Optional[_Union[FileChanged, _Mapping]] = ..., workspace_status: _Optional[_Union[WorkspaceStatusEvent, _Mapping]] = ..., session_status: _Optional[_Union[SessionStatusEvent, _Mapping]] = ..., events_dropped: _Optional[_Union[EventsDropped, _Mapping]] = ..., agent_message: _Optional[_Union[AgentMessagePosted, _Mapping]] = ...) -> None: ...

class WatchStarted(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class WorkspaceStatusEvent(_message.Message):
    __slots__ = ["agent_type", "deleted", "message", "provider", "session_id", "status", "workspace_id"]
    AGENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    agent_type: str
    deleted: bool
    message: str
    provider: str
    session_id: str
    status: _workspace_pb2.WorkspaceStatus
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., status: _Optional[_Union[_workspace_pb2.WorkspaceStatus, str]] = ..., message: _Optional[str] = ..., deleted: bool = ..., provider: _Optional[str] = ..., agent_type: _Optional[str] = ..., session_id: _Optional[str] = ...) -> None: ...

class AuditOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class AgentMessageKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class FileChangeKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
