from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
GIT_CHANGE_ADDED: GitChange
GIT_CHANGE_COPIED: GitChange
GIT_CHANGE_DELETED: GitChange
GIT_CHANGE_MODIFIED: GitChange
GIT_CHANGE_RENAMED: GitChange
GIT_CHANGE_TYPE_CHANGED: GitChange
GIT_CHANGE_UNMERGED: GitChange
GIT_CHANGE_UNSPECIFIED: GitChange

class GitCheckoutRequest(_message.Message):
    __slots__ = ["branch", "create", "workspace_id"]
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    CREATE_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    branch: str
    create: bool
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., branch: _Optional[str] = ..., create: bool = ...) -> None: ...

class GitCheckoutResponse(_message.Message):
    __slots__ = ["branch", "commit", "created"]
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    branch: str
    commit: str
    created: bool
    def __init__(self, branch: _Optional[str] = ..., commit: _Optional[str] = ..., created: bool = ...) -> None: ...

class GitCommitRequest(_message.Message):
    __slots__ = ["all", "files", "message", "workspace_id"]
    ALL_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    all: bool
    files: _containers.RepeatedScalarFieldContainer[str]
    message: str
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., message: _Optional[str] = ..., files: _Optional[_Iterable[str]] = ..., all: bool = ...) -> None: ...

class GitCommitResponse(_message.Message):
    __slots__ = ["author", "branch", "commit", "files_changed"]
    AUTHOR_FIELD_NUMBER: _ClassVar[int]
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    FILES_CHANGED_FIELD_NUMBER: _ClassVar[int]
    author: str
    branch: str
    commit: str
    files_changed: int
    def __init__(self, commit: _Optional[str] = ..., branch: _Optional[str] = ..., author: _Optional[str] = ..., files_changed: _Optional[int] = ...) -> None: ...

class GitDiff(_message.Message):
    __slots__ = ["diff", "files", "lines_added", "lines_removed", "total_bytes", "truncated"]
    DIFF_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    LINES_ADDED_FIELD_NUMBER: _ClassVar[int]
    LINES_REMOVED_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    diff: str
    files: _containers.RepeatedCompositeFieldContainer[GitFileDiff]
    lines_added: int
    lines_removed: int
    total_bytes: int
    truncated: bool
    def __init__(self, diff: _Optional[str] = ..., files: _Optional[_Iterable[_Union[GitFileDiff, _Mapping]]] = ..., truncated: bool = ..., total_bytes: _Optional[int] = ..., lines_added: _Optional[int] = ..., lines_removed: _Optional[int] = ...) -> None: ...

class GitDiffRequest(_message.Message):
    __slots__ = ["context_lines", "paths", "ref", "workspace_id"]
    CONTEXT_LINES_FIELD_NUMBER: _ClassVar[int]
    PATHS_FIELD_NUMBER: _ClassVar[int]
    REF_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    context_lines: int
    paths: _containers.RepeatedScalarFieldContainer[str]
    ref: str
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., paths: _Optional[_Iterable[str]] = ..., ref: _Optional[str] = ..., context_lines: _Optional[int] = ...) -> None: ...

class GitDiffResponse(_message.Message):
    __slots__ = ["against_ref", "staged", "unstaged"]
    AGAINST_REF_FIELD_NUMBER: _ClassVar[int]
    STAGED_FIELD_NUMBER: _ClassVar[int]
    UNSTAGED_FIELD_NUMBER: _ClassVar[int]
    against_ref: GitDiff
    staged: GitDiff
    unstaged: GitDiff
    def __init__(self, staged: _Optional[_Union[GitDiff, _Mapping]] = ..., unstaged: _Optional[_Union[GitDiff, _Mapping]] = ..., against_ref: _Optional[_Union[GitDiff, _Mapping]] = ...) -> None: ...

class GitFileDiff(_message.Message):
    __slots__ = ["added", "binary", "old_path", "path", "removed", "sensitive"]
    ADDED_FIELD_NUMBER: _ClassVar[int]
    BINARY_FIELD_NUMBER: _ClassVar[int]
    OLD_PATH_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    SENSITIVE_FIELD_NUMBER: _ClassVar[int]
    added: int
    binary: bool
    old_path: str
    path: str
    removed: int
    sensitive: bool
    def __init__(self, path: _Optional[str] = ..., old_path: _Optional[str] = ..., added: _Optional[int] = ..., removed: _Optional[int] = ..., binary: bool = ..., sensitive: bool = ...) -> None: ...

class GitFileStatus(_message.Message):
    __slots__ = ["path", "renamed_from", "staged", "unstaged", "untracked"]
    PATH_FIELD_NUMBER: _ClassVar[int]
    RENAMED_FROM_FIELD_NUMBER: _ClassVar[int]
    STAGED_FIELD_NUMBER: _ClassVar[int]
    UNSTAGED_FIELD_NUMBER: _ClassVar[int]
    UNTRACKED_FIELD_NUMBER: _ClassVar[int]
    path: str
    renamed_from: str
    staged: GitChange
    unstaged: GitChange
    untracked: bool
    def __init__(self, path: _Optional[str] = ..., staged: _Optional[_Union[GitChange, str]] = ..., unstaged: _Optional[_Union[GitChange, str]] = ..., untracked: bool = ..., renamed_from: _Optional[str] = ...) -> None: ...

class GitPushRequest(_message.Message):
    __slots__ = ["branch", "force", "workspace_id"]
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    branch: str
    force: bool
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ..., branch: _Optional[str] = ..., force: bool = ...) -> None: ...

class GitPushResponse(_message.Message):
    __slots__ = ["branch", "commit", "commits_pushed", "created", "repository_url"]
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    COMMITS_PUSHED_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    REPOSITORY_URL_FIELD_NUMBER: _ClassVar[int]
    branch: str
    commit: str
    commits_pushed: int
    created: bool
    repository_url: str
    def __init__(self, branch: _Optional[str] = ..., commit: _Optional[str] = ..., repository_url: _Optional[str] = ..., created: bool = ..., commits_pushed: _Optional[int] = ...) -> None: ...

class GitStatusRequest(_message.Message):
    __slots__ = ["workspace_id"]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    workspace_id: str
    def __init__(self, workspace_id: _Optional[str] = ...) -> None: ...

class GitStatusResponse(_message.Message):
    __slots__ = ["ahead", "behind", "branch", "commit", "detached", "files", "truncated", "upstream"]
    AHEAD_FIELD_NUMBER: _ClassVar[int]
    BEHIND_FIELD_NUMBER: _ClassVar[int]
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    DETACHED_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    UPSTREAM_FIELD_NUMBER: _ClassVar[int]
    ahead: int
    behind: int
    branch: str
    commit: str
    detached: bool
    files: _containers.RepeatedCompositeFieldContainer[GitFileStatus]
    truncated: bool
    upstream: str
    def __init__(self, branch: _Optional[str] = ..., commit: _Optional[str] = ..., upstream: _Optional[str] = ..., ahead: _Optional[int] = ..., behind: _Optional[int] = ..., files: _Optional[_Iterable[_Union[GitFileStatus, _Mapping]]] = ..., detached: bool = ..., truncated: bool = ...) -> None: ...

class GitChange(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
