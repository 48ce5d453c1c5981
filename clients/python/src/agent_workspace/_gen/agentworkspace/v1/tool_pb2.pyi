from . import git_pb2 as _git_pb2
from . import options_pb2 as _options_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
FILE_KIND_BINARY: FileKind
FILE_KIND_DIRECTORY: FileKind
FILE_KIND_TEXT: FileKind
FILE_KIND_UNSPECIFIED: FileKind
FILE_TYPE_DIRECTORY: FileType
FILE_TYPE_FILE: FileType
FILE_TYPE_OTHER: FileType
FILE_TYPE_SYMLINK: FileType
FILE_TYPE_UNSPECIFIED: FileType

class BashExited(_message.Message):
    __slots__ = ["duration_ms", "exit_code", "oom_killed", "signal", "stderr_total_bytes", "stderr_truncated", "stdout_total_bytes", "stdout_truncated", "timed_out"]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    OOM_KILLED_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    STDERR_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    STDERR_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    STDOUT_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    STDOUT_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    TIMED_OUT_FIELD_NUMBER: _ClassVar[int]
    duration_ms: int
    exit_code: int
    oom_killed: bool
    signal: str
    stderr_total_bytes: int
    stderr_truncated: bool
    stdout_total_bytes: int
    stdout_truncated: bool
    timed_out: bool
    def __init__(self, exit_code: _Optional[int] = ..., duration_ms: _Optional[int] = ..., timed_out: bool = ..., signal: _Optional[str] = ..., stdout_truncated: bool = ..., stderr_truncated: bool = ..., stdout_total_bytes: _Optional[int] = ..., stderr_total_bytes: _Optional[int] = ..., oom_killed: bool = ...) -> None: ...

class BashRequest(_message.Message):
    __slots__ = ["command", "env", "timeout_ms", "workdir", "workspace_id"]
    class EnvEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    WORKDIR_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    command: str
    env: _containers.ScalarMap[str, str]
    timeout_ms: int
    workdir: str
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., command: _Optional[str] = ..., workdir: _Optional[str] = ..., timeout_ms: _Optional[int] = ..., env: _Optional[_Mapping[str, str]] = ...) -> None: ...

class BashResponse(_message.Message):
    __slots__ = ["duration_ms", "exit_code", "oom_killed", "signal", "stderr", "stderr_total_bytes", "stderr_truncated", "stdout", "stdout_total_bytes", "stdout_truncated"]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    OOM_KILLED_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    STDERR_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    STDERR_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDOUT_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    STDOUT_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    duration_ms: int
    exit_code: int
    oom_killed: bool
    signal: str
    stderr: str
    stderr_total_bytes: int
    stderr_truncated: bool
    stdout: str
    stdout_total_bytes: int
    stdout_truncated: bool
    def __init__(self, stdout: _Optional[str] = ..., stderr: _Optional[str] = ..., exit_code: _Optional[int] = ..., duration_ms: _Optional[int] = ..., stdout_truncated: bool = ..., stderr_truncated: bool = ..., stdout_total_bytes: _Optional[int] = ..., stderr_total_bytes: _Optional[int] = ..., signal: _Optional[str] = ..., oom_killed: bool = ...) -> None: ...

class BashStarted(_message.Message):
    __slots__ = ["started_at"]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    started_at: _timestamp_pb2.Timestamp
    def __init__(self, started_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class DeleteFileRequest(_message.Message):
    __slots__ = ["path", "workspace_id"]
    PATH_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    path: str
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class DeleteFileResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class EditFileRequest(_message.Message):
    __slots__ = ["new_string", "old_string", "path", "replace_all", "workspace_id"]
    NEW_STRING_FIELD_NUMBER: _ClassVar[int]
    OLD_STRING_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    REPLACE_ALL_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    new_string: str
    old_string: str
    path: str
    replace_all: bool
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., path: _Optional[str] = ..., old_string: _Optional[str] = ..., new_string: _Optional[str] = ..., replace_all: bool = ...) -> None: ...

class EditFileResponse(_message.Message):
    __slots__ = ["lines_changed", "replacements"]
    LINES_CHANGED_FIELD_NUMBER: _ClassVar[int]
    REPLACEMENTS_FIELD_NUMBER: _ClassVar[int]
    lines_changed: int
    replacements: int
    def __init__(self, replacements: _Optional[int] = ..., lines_changed: _Optional[int] = ...) -> None: ...

class FileInfo(_message.Message):
    __slots__ = ["modified", "path", "size", "type"]
    MODIFIED_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    modified: _timestamp_pb2.Timestamp
    path: str
    size: int
    type: FileType
    def __init__(self, path: _Optional[str] = ..., size: _Optional[int] = ..., modified: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., type: _Optional[_Union[FileType, str]] = ...) -> None: ...

class GlobRequest(_message.Message):
    __slots__ = ["limit", "path", "pattern", "workspace_id"]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    limit: int
    path: str
    pattern: str
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., pattern: _Optional[str] = ..., path: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class GlobResponse(_message.Message):
    __slots__ = ["paths", "truncated"]
    PATHS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    paths: _containers.RepeatedScalarFieldContainer[str]
    truncated: bool
    def __init__(self, paths: _Optional[_Iterable[str]] = ..., truncated: bool = ...) -> None: ...

class GrepDone(_message.Message):
    __slots__ = ["match_count", "truncated"]
    MATCH_COUNT_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    match_count: int
    truncated: bool
    def __init__(self, match_count: _Optional[int] = ..., truncated: bool = ...) -> None: ...

class GrepMatch(_message.Message):
    __slots__ = ["content", "line", "path"]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    content: str
    line: int
    path: str
    def __init__(self, path: _Optional[str] = ..., line: _Optional[int] = ..., content: _Optional[str] = ...) -> None: ...

class GrepRequest(_message.Message):
    __slots__ = ["case_sensitive", "context_lines", "glob", "max_results", "path", "pattern", "workspace_id"]
    CASE_SENSITIVE_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_LINES_FIELD_NUMBER: _ClassVar[int]
    GLOB_FIELD_NUMBER: _ClassVar[int]
    MAX_RESULTS_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    case_sensitive: bool
    context_lines: int
    glob: str
    max_results: int
    path: str
    pattern: str
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., pattern: _Optional[str] = ..., path: _Optional[str] = ..., glob: _Optional[str] = ..., case_sensitive: bool = ..., context_lines: _Optional[int] = ..., max_results: _Optional[int] = ...) -> None: ...

class GrepResponse(_message.Message):
    __slots__ = ["matches", "truncated"]
    MATCHES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    matches: _containers.RepeatedCompositeFieldContainer[GrepMatch]
    truncated: bool
    def __init__(self, matches: _Optional[_Iterable[_Union[GrepMatch, _Mapping]]] = ..., truncated: bool = ...) -> None: ...

class ListFilesRequest(_message.Message):
    __slots__ = ["names_only", "path", "pattern", "workspace_id"]
    NAMES_ONLY_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    names_only: bool
    path: str
    pattern: str
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., path: _Optional[str] = ..., pattern: _Optional[str] = ..., names_only: bool = ...) -> None: ...

class ListFilesResponse(_message.Message):
    __slots__ = ["files", "truncated"]
    FILES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    files: _containers.RepeatedCompositeFieldContainer[FileInfo]
    truncated: bool
    def __init__(self, files: _Optional[_Iterable[_Union[FileInfo, _Mapping]]] = ..., truncated: bool = ...) -> None: ...

class Patch(_message.Message):
    __slots__ = ["find", "replace"]
    FIND_FIELD_NUMBER: _ClassVar[int]
    REPLACE_FIELD_NUMBER: _ClassVar[int]
    find: str
    replace: str
    def __init__(self, find: _Optional[str] = ..., replace: _Optional[str] = ...) -> None: ...

class PatchFileRequest(_message.Message):
    __slots__ = ["patches", "path", "workspace_id"]
    PATCHES_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    patches: _containers.RepeatedCompositeFieldContainer[Patch]
    path: str
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., path: _Optional[str] = ..., patches: _Optional[_Iterable[_Union[Patch, _Mapping]]] = ...) -> None: ...

class PatchFileResponse(_message.Message):
    __slots__ = ["patches_applied"]
    PATCHES_APPLIED_FIELD_NUMBER: _ClassVar[int]
    patches_applied: int
    def __init__(self, patches_applied: _Optional[int] = ...) -> None: ...

class ReadFileRequest(_message.Message):
    __slots__ = ["limit", "offset", "path", "workspace_id"]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    limit: int
    offset: int
    path: str
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., path: _Optional[str] = ..., offset: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class ReadFileResponse(_message.Message):
    __slots__ = ["content", "kind", "mime_type", "path", "size", "total_lines", "truncated"]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_LINES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    content: str
    kind: FileKind
    mime_type: str
    path: str
    size: int
    total_lines: int
    truncated: bool
    def __init__(self, content: _Optional[str] = ..., total_lines: _Optional[int] = ..., truncated: bool = ..., kind: _Optional[_Union[FileKind, str]] = ..., size: _Optional[int] = ..., mime_type: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class StreamBashRequest(_message.Message):
    __slots__ = ["command", "env", "max_output_bytes", "timeout_ms", "workdir", "workspace_id"]
    class EnvEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    WORKDIR_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    command: str
    env: _containers.ScalarMap[str, str]
    max_output_bytes: int
    timeout_ms: int
    workdir: str
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., command: _Optional[str] = ..., workdir: _Optional[str] = ..., timeout_ms: _Optional[int] = ..., env: _Optional[_Mapping[str, str]] = ..., max_output_bytes: _Optional[int] = ...) -> None: ...

class StreamBashResponse(_message.Message):
    __slots__ = ["exited", "started", "stderr", "stdout"]
    EXITED_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    exited: BashExited
    started: BashStarted
    stderr: bytes
    stdout: bytes
    def __init__(self, started: _Optional[_Union[BashStarted, _Mapping]] = ..., stdout: _Optional[bytes] = ..., stderr: _Optional[bytes] = ..., exited: _Optional[_Union[BashExited, _Mapping]] = ...) -> None: ...

class StreamGrepRequest(_message.Message):
    __slots__ = ["case_sensitive", "context_lines", "glob", "max_results", "path", "pattern", "workspace_id"]
    CASE_SENSITIVE_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_LINES_FIELD_NUMBER: _ClassVar[int]
    GLOB_FIELD_NUMBER: _ClassVar[int]
    MAX_RESULTS_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    case_sensitive: bool
    context_lines: int
    glob: str
    max_results: int
    path: str
    pattern: str
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., pattern: _Optional[str] = ..., path: _Optional[str] = ..., glob: _Optional[str] = ..., case_sensitive: bool = ..., context_lines: _Optional[int] = ..., max_results: _Optional[int] = ...) -> None: ...

class StreamGrepResponse(_message.Message):
    __slots__ = ["done", "match"]
    DONE_FIELD_NUMBER: _ClassVar[int]
    MATCH_FIELD_NUMBER: _ClassVar[int]
    done: GrepDone
    match: GrepMatch
    def __init__(self, match: _Optional[_Union[GrepMatch, _Mapping]] = ..., done: _Optional[_Union[GrepDone, _Mapping]] = ...) -> None: ...

class WriteFileRequest(_message.Message):
    __slots__ = ["content", "path", "workspace_id"]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    content: str
    path: str
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., path: _Optional[str] = ..., content: _Optional[str] = ...) -> None: ...

class WriteFileResponse(_message.Message):
    __slots__ = ["bytes_written", "created"]
    BYTES_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    bytes_written: int
    created: bool
    def __init__(self, bytes_written: _Optional[int] = ..., created: bool = ...) -> None: ...

class FileKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class FileType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
