from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
ERROR_REASON_ACCESS_DENIED: ErrorReason
ERROR_REASON_AGENT_TYPE_EXISTS: ErrorReason
ERROR_REASON_AGENT_TYPE_IN_USE: ErrorReason
ERROR_REASON_AGENT_TYPE_NOT_FOUND: ErrorReason
ERROR_REASON_AGENT_TYPE_WORKSPACE_DISABLED: ErrorReason
ERROR_REASON_BINARY_CONTENT: ErrorReason
ERROR_REASON_BRANCH_EXISTS: ErrorReason
ERROR_REASON_CALLER_NOT_PERMITTED: ErrorReason
ERROR_REASON_CANCELLED: ErrorReason
ERROR_REASON_CHECKOUT_CONFLICT: ErrorReason
ERROR_REASON_COMMAND_NOT_ALLOWED: ErrorReason
ERROR_REASON_COMMAND_TIMEOUT: ErrorReason
ERROR_REASON_CONCURRENT_MODIFICATION: ErrorReason
ERROR_REASON_CONTENT_TOO_LONG: ErrorReason
ERROR_REASON_DATABASE_UNAVAILABLE: ErrorReason
ERROR_REASON_EGRESS_DENIED: ErrorReason
ERROR_REASON_ENFORCEMENT_UNAVAILABLE: ErrorReason
ERROR_REASON_FILE_NOT_FOUND: ErrorReason
ERROR_REASON_FILE_TOO_LARGE: ErrorReason
ERROR_REASON_FIND_NOT_FOUND: ErrorReason
ERROR_REASON_FIND_NOT_UNIQUE: ErrorReason
ERROR_REASON_FORCE_PUSH_DENIED: ErrorReason
ERROR_REASON_GIT_CREDENTIAL_UNAVAILABLE: ErrorReason
ERROR_REASON_GIT_FAILED: ErrorReason
ERROR_REASON_GIT_REMOTE_FAILED: ErrorReason
ERROR_REASON_HOST_PATH_NOT_ALLOWED: ErrorReason
ERROR_REASON_INTERNAL: ErrorReason
ERROR_REASON_INVALID_ARGUMENT: ErrorReason
ERROR_REASON_INVALID_PATTERN: ErrorReason
ERROR_REASON_IS_DIRECTORY: ErrorReason
ERROR_REASON_MOUNT_TOO_LARGE: ErrorReason
ERROR_REASON_NOTHING_TO_COMMIT: ErrorReason
ERROR_REASON_NOT_A_DIRECTORY: ErrorReason
ERROR_REASON_NOT_A_GIT_REPOSITORY: ErrorReason
ERROR_REASON_NOT_A_TERMINAL: ErrorReason
ERROR_REASON_NO_REPOSITORY: ErrorReason
ERROR_REASON_OUTSIDE_SESSION: ErrorReason
ERROR_REASON_PATH_CHANGED: ErrorReason
ERROR_REASON_PATH_NOT_ASCII: ErrorReason
ERROR_REASON_PATH_OUTSIDE_WORKSPACE: ErrorReason
ERROR_REASON_PATH_SEGMENT_TOO_LONG: ErrorReason
ERROR_REASON_PATH_TOO_DEEP: ErrorReason
ERROR_REASON_PORT_NOT_EXPOSED: ErrorReason
ERROR_REASON_PORT_NOT_LISTENING: ErrorReason
ERROR_REASON_PROCESSES_UNSUPPORTED: ErrorReason
ERROR_REASON_PROCESS_LIMIT: ErrorReason
ERROR_REASON_PROCESS_NOT_FOUND: ErrorReason
ERROR_REASON_PROCESS_NOT_RUNNING: ErrorReason
ERROR_REASON_PROTECTED_BRANCH: ErrorReason
ERROR_REASON_PROVIDER_UNAVAILABLE: ErrorReason
ERROR_REASON_RESOURCE_EXHAUSTED: ErrorReason
ERROR_REASON_REVISION_NOT_FOUND: ErrorReason
ERROR_REASON_RIPGREP_NOT_FOUND: ErrorReason
ERROR_REASON_SENSITIVE_FILE: ErrorReason
ERROR_REASON_SESSION_NOT_FOUND: ErrorReason
ERROR_REASON_SESSION_NOT_READY: ErrorReason
ERROR_REASON_STDIN_CLOSED: ErrorReason
ERROR_REASON_TOOL_NOT_ENABLED: ErrorReason
ERROR_REASON_UNAUTHENTICATED: ErrorReason
ERROR_REASON_UNKNOWN_PROVIDER: ErrorReason
ERROR_REASON_UNKNOWN_TOOL: ErrorReason
ERROR_REASON_UNSPECIFIED: ErrorReason
ERROR_REASON_UNSUPPORTED_FILE_TYPE: ErrorReason
ERROR_REASON_WORKSPACE_DISABLED: ErrorReason
ERROR_REASON_WORKSPACE_NOT_FOUND: ErrorReason
ERROR_REASON_WORKSPACE_NOT_PROVISIONED: ErrorReason
ERROR_REASON_WORKSPACE_NOT_READY: ErrorReason
ERROR_REASON_WORKSPACE_NOT_SHAREABLE: ErrorReason
ERROR_REASON_WORKSPACE_SERVED_ELSEWHERE: ErrorReason
ERROR_REASON_WRITE_FAILED: ErrorReason

class ClosestMatch(_message.Message):
    __slots__ = ["end_line", "similarity", "start_line", "text"]
    END_LINE_FIELD_NUMBER: _ClassVar[int]
    SIMILARITY_FIELD_NUMBER: _ClassVar[int]
    START_LINE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    end_line: int
    similarity: float
    start_line: int
    text: str
    def __init__(self, start_line: _Optional[int] = ..., end_line: _Optional[int] = ..., text: _Optional[str] = ..., similarity: _Optional[float] = ...) -> None: ...

class ErrorDetail(_message.Message):
    __slots__ = ["closest_match", "message", "metadata", "partial_output", "reason"]
    class MetadataEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CLOSEST_MATCH_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    closest_match: ClosestMatch
    message: str
    metadata: _containers.ScalarMap[str, str]
    partial_output: PartialOutput
    reason: ErrorReason
    def __init__(self, reason: _Optional[_Union[ErrorReason, str]] = ..., message: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., partial_output: _Optional[_Union[PartialOutput, _Mapping]] = ..., closest_match: _Optional[_Union[ClosestMatch, _Mapping]] = ...) -> None: ...

class PartialOutput(_message.Message):
    __slots__ = ["duration_ms", "stderr", "stderr_total_bytes", "stderr_truncated", "stdout", "stdout_total_bytes", "stdout_truncated"]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    STDERR_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    STDERR_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDOUT_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    STDOUT_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    duration_ms: int
    stderr: str
    stderr_total_bytes: int
    stderr_truncated: bool
    stdout: str
    stdout_total_bytes: int
    stdout_truncated: bool
    def __init__(self, stdout: _Optional[str] = ..., stderr: _Optional[str] = ..., stdout_truncated: bool = ..., stderr_truncated: bool = ..., stdout_total_bytes: _Optional[int] = ..., stderr_total_bytes: _Optional[int] = ..., duration_ms: _Optional[int] = ...) -> None: ...

class ErrorReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
