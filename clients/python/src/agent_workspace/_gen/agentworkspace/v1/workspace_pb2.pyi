from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
DIGEST_SOURCE_AGENT_TYPE: DigestSource
DIGEST_SOURCE_PLACEHOLDER: DigestSource
DIGEST_SOURCE_SESSION: DigestSource
DIGEST_SOURCE_UNSPECIFIED: DigestSource
PROVISIONING_STAGE_CLONE: ProvisioningStage
PROVISIONING_STAGE_SANDBOX: ProvisioningStage
PROVISIONING_STAGE_SETUP_COMMAND: ProvisioningStage
PROVISIONING_STAGE_UNSPECIFIED: ProvisioningStage
PROVISIONING_STAGE_WARM_POOL: ProvisioningStage
SESSION_STATUS_ACTIVE: SessionStatus
SESSION_STATUS_DEGRADED: SessionStatus
SESSION_STATUS_ENDED: SessionStatus
SESSION_STATUS_PROVISIONING: SessionStatus
SESSION_STATUS_UNSPECIFIED: SessionStatus
WORKSPACE_STATUS_CREATING: WorkspaceStatus
WORKSPACE_STATUS_FAILED: WorkspaceStatus
WORKSPACE_STATUS_PAUSED: WorkspaceStatus
WORKSPACE_STATUS_READY: WorkspaceStatus
WORKSPACE_STATUS_STOPPED: WorkspaceStatus
WORKSPACE_STATUS_UNSPECIFIED: WorkspaceStatus

class Checkout(_message.Message):
    __slots__ = ["branch", "commit", "repository_url"]
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    REPOSITORY_URL_FIELD_NUMBER: _ClassVar[int]
    branch: str
    commit: str
    repository_url: str
    def __init__(self, repository_url: _Optional[str] = ..., branch: _Optional[str] = ..., commit: _Optional[str] = ...) -> None: ...

class CreateWorkspaceRequest(_message.Message):
    __slots__ = ["agent_type", "image", "labels", "limits", "mounts", "provider"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    AGENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    MOUNTS_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    agent_type: str
    image: str
    labels: _containers.ScalarMap[str, str]
    limits: ResourceLimits
    mounts: _containers.RepeatedCompositeFieldContainer[HostMount]
    provider: str
    def __init__(self, provider: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., limits: _Optional[_Union[ResourceLimits, _Mapping]] = ..., image: _Optional[str] = ..., agent_type: _Optional[str] = ..., mounts: _Optional[_Iterable[_Union[HostMount, _Mapping]]] = ...) -> None: ...

class CreateWorkspaceResponse(_message.Message):
    __slots__ = ["workspace"]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    workspace: Workspace
    def __init__(self, workspace: _Optional[_Union[Workspace, _Mapping]] = ...) -> None: ...

class DeleteWorkspaceRequest(_message.Message):
    __slots__ = ["id"]
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class DeleteWorkspaceResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class EndSessionRequest(_message.Message):
    __slots__ = ["id"]
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class EndSessionResponse(_message.Message):
    __slots__ = ["session"]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: Session
    def __init__(self, session: _Optional[_Union[Session, _Mapping]] = ...) -> None: ...

class GetSessionRequest(_message.Message):
    __slots__ = ["id"]
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class GetSessionResponse(_message.Message):
    __slots__ = ["session"]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: Session
    def __init__(self, session: _Optional[_Union[Session, _Mapping]] = ...) -> None: ...

class GetWorkspaceDigestRequest(_message.Message):
    __slots__ = ["section_key", "session_id"]
    SECTION_KEY_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    section_key: str
    session_id: str
    def __init__(self, session_id: _Optional[str] = ..., section_key: _Optional[str] = ...) -> None: ...

class GetWorkspaceDigestResponse(_message.Message):
    __slots__ = ["digest", "source"]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    digest: WorkspaceDigest
    source: DigestSource
    def __init__(self, digest: _Optional[_Union[WorkspaceDigest, _Mapping]] = ..., source: _Optional[_Union[DigestSource, str]] = ...) -> None: ...

class GetWorkspaceRequest(_message.Message):
    __slots__ = ["id"]
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class GetWorkspaceResponse(_message.Message):
    __slots__ = ["workspace"]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    workspace: Workspace
    def __init__(self, workspace: _Optional[_Union[Workspace, _Mapping]] = ...) -> None: ...

class HostMount(_message.Message):
    __slots__ = ["exclude_glob", "follow_symlinks", "host_path", "include_glob", "max_bytes", "mount_path"]
    EXCLUDE_GLOB_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_SYMLINKS_FIELD_NUMBER: _ClassVar[int]
    HOST_PATH_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_GLOB_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    MOUNT_PATH_FIELD_NUMBER: _ClassVar[int]
    exclude_glob: _containers.RepeatedScalarFieldContainer[str]
    follow_symlinks: bool
    host_path: str
    include_glob: _containers.RepeatedScalarFieldContainer[str]
    max_bytes: int
    mount_path: str
    def __init__(self, host_path: _Optional[str] = ..., mount_path: _Optional[str] = ..., include_glob: _Optional[_Iterable[str]] = ..., exclude_glob: _Optional[_Iterable[str]] = ..., max_bytes: _Optional[int] = ..., follow_symlinks: bool = ...) -> None: ...

class ListSessionsRequest(_message.Message):
    __slots__ = ["agent_type", "page_size", "page_token", "status"]
    AGENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    agent_type: str
    page_size: int
    page_token: str
    status: SessionStatus
    def __init__(self, agent_type: _Optional[str] = ..., status: _Optional[_Union[SessionStatus, str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListSessionsResponse(_message.Message):
    __slots__ = ["next_page_token", "sessions"]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    next_page_token: str
    sessions: _containers.RepeatedCompositeFieldContainer[Session]
    def __init__(self, sessions: _Optional[_Iterable[_Union[Session, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListWorkspacesRequest(_message.Message):
    __slots__ = ["labels", "page_size", "page_token", "provider"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    LABELS_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    labels: _containers.ScalarMap[str, str]
    page_size: int
    page_token: str
    provider: str
    def __init__(self, provider: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListWorkspacesResponse(_message.Message):
    __slots__ = ["next_page_token", "workspaces"]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    WORKSPACES_FIELD_NUMBER: _ClassVar[int]
    next_page_token: str
    workspaces: _containers.RepeatedCompositeFieldContainer[Workspace]
    def __init__(self, workspaces: _Optional[_Iterable[_Union[Workspace, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class MountPreview(_message.Message):
    __slots__ = ["bytes_copied", "files_copied", "host_path", "mount_path", "skipped", "skipped_truncated"]
    BYTES_COPIED_FIELD_NUMBER: _ClassVar[int]
    FILES_COPIED_FIELD_NUMBER: _ClassVar[int]
    HOST_PATH_FIELD_NUMBER: _ClassVar[int]
    MOUNT_PATH_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    bytes_copied: int
    files_copied: int
    host_path: str
    mount_path: str
    skipped: _containers.RepeatedCompositeFieldContainer[MountSkip]
    skipped_truncated: bool
    def __init__(self, host_path: _Optional[str] = ..., mount_path: _Optional[str] = ..., files_copied: _Optional[int] = ..., bytes_copied: _Optional[int] = ..., skipped: _Optional[_Iterable[_Union[MountSkip, _Mapping]]] = ..., skipped_truncated: bool = ...) -> None: ...

class MountSkip(_message.Message):
    __slots__ = ["path", "reason"]
    PATH_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    path: str
    reason: str
    def __init__(self, path: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class PauseWorkspaceRequest(_message.Message):
    __slots__ = ["id"]
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class PauseWorkspaceResponse(_message.Message):
    __slots__ = ["workspace"]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    workspace: Workspace
    def __init__(self, workspace: _Optional[_Union[Workspace, _Mapping]] = ...) -> None: ...

class ResourceLimits(_message.Message):
    __slots__ = ["cpu", "disk", "memory", "pids"]
    CPU_FIELD_NUMBER: _ClassVar[int]
    DISK_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    PIDS_FIELD_NUMBER: _ClassVar[int]
    cpu: str
    disk: str
    memory: str
    pids: int
    def __init__(self, cpu: _Optional[str] = ..., memory: _Optional[str] = ..., disk: _Optional[str] = ..., pids: _Optional[int] = ...) -> None: ...

class ResumeWorkspaceRequest(_message.Message):
    __slots__ = ["id"]
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class ResumeWorkspaceResponse(_message.Message):
    __slots__ = ["workspace"]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    workspace: Workspace
    def __init__(self, workspace: _Optional[_Union[Workspace, _Mapping]] = ...) -> None: ...

class Session(_message.Message):
    __slots__ = ["agent_type", "checkout", "created_at", "ended_at", "from_warm_pool", "id", "joined_workspace", "labels", "last_activity_at", "provider", "ready_at", "status", "status_message", "task", "warnings", "workspace_enabled", "workspace_id"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    AGENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    CHECKOUT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    FROM_WARM_POOL_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    JOINED_WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    LAST_ACTIVITY_AT_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    READY_AT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    STATUS_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ENABLED_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    agent_type: str
    checkout: Checkout
    created_at: _timestamp_pb2.Timestamp
    ended_at: _timestamp_pb2.Timestamp
    from_warm_pool: bool
    id: str
    joined_workspace: bool
    labels: _containers.ScalarMap[str, str]
    last_activity_at: _timestamp_pb2.Timestamp
    provider: str
    ready_at: _timestamp_pb2.Timestamp
    status: SessionStatus
    status_message: str
    task: TaskContext
    warnings: _containers.RepeatedCompositeFieldContainer[SessionWarning]
    workspace_enabled: bool
    workspace_id: str
    def __init__(self, id: _Optional[str] = ..., agent_type: _Optional[str] = ..., status: _Optional[_Union[SessionStatus, str]] = ..., workspace_id: _Optional[str] = ..., task: _Optional[_Union[TaskContext, _Mapping]] = ..., warnings: _Optional[_Iterable[_Union[SessionWarning, _Mapping]]] = ..., status_message: _Optional[str] = ..., created_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., ready_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., ended_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., last_activity_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., provider: _Optional[str] = ..., from_warm_pool: bool = ..., checkout: _Optional[_Union[Checkout, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ..., workspace_enabled: bool = ..., joined_workspace: bool = ...) -> None: ...

class SessionStatusChanged(_message.Message):
    __slots__ = ["message", "status", "workspace_id"]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    message: str
    status: SessionStatus
    workspace_id: str
    def __init__(self, status: _Optional[_Union[SessionStatus, str]] = ..., message: _Optional[str] = ..., workspace_id: _Optional[str] = ...) -> None: ...

class SessionWarning(_message.Message):
    __slots__ = ["command", "exit_code", "message", "stage", "timed_out"]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    TIMED_OUT_FIELD_NUMBER: _ClassVar[int]
    command: str
    exit_code: int
    message: str
    stage: ProvisioningStage
    timed_out: bool
    def __init__(self, stage: _Optional[_Union[ProvisioningStage, str]] = ..., message: _Optional[str] = ..., command: _Optional[str] = ..., exit_code: _Optional[int] = ..., timed_out: bool = ...) -> None: ...

class SetWorkspaceDigestRequest(_message.Message):
    __slots__ = ["digest", "session_id"]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    digest: WorkspaceDigest
    session_id: str
    def __init__(self, session_id: _Optional[str] = ..., digest: _Optional[_Union[WorkspaceDigest, _Mapping]] = ...) -> None: ...

class SetWorkspaceDigestResponse(_message.Message):
    __slots__ = ["digest"]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    digest: WorkspaceDigest
    def __init__(self, digest: _Optional[_Union[WorkspaceDigest, _Mapping]] = ...) -> None: ...

class StageEnded(_message.Message):
    __slots__ = ["duration_ms", "exit_code", "index", "message", "ok", "stage", "timed_out"]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    TIMED_OUT_FIELD_NUMBER: _ClassVar[int]
    duration_ms: int
    exit_code: int
    index: int
    message: str
    ok: bool
    stage: ProvisioningStage
    timed_out: bool
    def __init__(self, stage: _Optional[_Union[ProvisioningStage, str]] = ..., index: _Optional[int] = ..., ok: bool = ..., exit_code: _Optional[int] = ..., timed_out: bool = ..., duration_ms: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class StageOutput(_message.Message):
    __slots__ = ["data", "index", "stage", "stderr"]
    DATA_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    index: int
    stage: ProvisioningStage
    stderr: bool
    def __init__(self, stage: _Optional[_Union[ProvisioningStage, str]] = ..., index: _Optional[int] = ..., data: _Optional[bytes] = ..., stderr: bool = ...) -> None: ...

class StageStarted(_message.Message):
    __slots__ = ["detail", "index", "stage"]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    detail: str
    index: int
    stage: ProvisioningStage
    def __init__(self, stage: _Optional[_Union[ProvisioningStage, str]] = ..., detail: _Optional[str] = ..., index: _Optional[int] = ...) -> None: ...

class StartSessionRequest(_message.Message):
    __slots__ = ["agent_type", "labels", "mounts", "task", "workspace_id"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    AGENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    MOUNTS_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_ID_FIELD_NUMBER: _ClassVar[int]
    agent_type: str
    labels: _containers.ScalarMap[str, str]
    mounts: _containers.RepeatedCompositeFieldContainer[HostMount]
    task: TaskContext
    workspace_id: str
    def __init__(self, agent_type: _Optional[str] = ..., task: _Optional[_Union[TaskContext, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ..., mounts: _Optional[_Iterable[_Union[HostMount, _Mapping]]] = ..., workspace_id: _Optional[str] = ...) -> None: ...

class StartSessionResponse(_message.Message):
    __slots__ = ["session", "session_token"]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    SESSION_TOKEN_FIELD_NUMBER: _ClassVar[int]
    session: Session
    session_token: str
    def __init__(self, session: _Optional[_Union[Session, _Mapping]] = ..., session_token: _Optional[str] = ...) -> None: ...

class TaskContext(_message.Message):
    __slots__ = ["base_branch", "branch", "pull_request_number", "repository_url"]
    BASE_BRANCH_FIELD_NUMBER: _ClassVar[int]
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    PULL_REQUEST_NUMBER_FIELD_NUMBER: _ClassVar[int]
    REPOSITORY_URL_FIELD_NUMBER: _ClassVar[int]
    base_branch: str
    branch: str
    pull_request_number: int
    repository_url: str
    def __init__(self, repository_url: _Optional[str] = ..., branch: _Optional[str] = ..., pull_request_number: _Optional[int] = ..., base_branch: _Optional[str] = ...) -> None: ...

class WatchSessionRequest(_message.Message):
    __slots__ = ["follow", "id"]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    follow: bool
    id: str
    def __init__(self, id: _Optional[str] = ..., follow: bool = ...) -> None: ...

class WatchSessionResponse(_message.Message):
    __slots__ = ["output", "stage_ended", "stage_started", "status", "time", "warning"]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    STAGE_ENDED_FIELD_NUMBER: _ClassVar[int]
    STAGE_STARTED_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    WARNING_FIELD_NUMBER: _ClassVar[int]
    output: StageOutput
    stage_ended: StageEnded
    stage_started: StageStarted
    status: SessionStatusChanged
    time: _timestamp_pb2.Timestamp
    warning: SessionWarning
    def __init__(self, time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., status: _Optional[_Union[SessionStatusChanged, _Mapping]] = ..., stage_started: _Optional[_Union[StageStarted, _Mapping]] = ..., output: _Optional[_Union[StageOutput, _Mapping]] = ..., stage_ended: _Optional[_Union[StageEnded, _Mapping]] = ..., warning: _Optional[_Union[SessionWarning, _Mapping]] = ...) -> None: ...

class Workspace(_message.Message):
    __slots__ = ["agent_type", "created_at", "id", "image", "labels", "limits", "mounts", "provider", "provider_details", "root", "session_id", "session_ids", "status", "status_message", "task"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class ProviderDetailsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    AGENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    MOUNTS_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_DETAILS_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    ROOT_FIELD_NUMBER: _ClassVar[int]
    SESSION_IDS_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    STATUS_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    agent_type: str
    created_at: _timestamp_pb2.Timestamp
    id: str
    image: str
    labels: _containers.ScalarMap[str, str]
    limits: ResourceLimits
    mounts: _containers.RepeatedCompositeFieldContainer[MountPreview]
    provider: str
    provider_details: _containers.ScalarMap[str, str]
    root: str
    session_id: str
    session_ids: _containers.RepeatedScalarFieldContainer[str]
    status: WorkspaceStatus
    status_message: str
    task: TaskContext
    def __init__(self, id: _Optional[str] = ..., provider: _Optional[str] = ..., status: _Optional[_Union[WorkspaceStatus, str]] = ..., root: _Optional[str] = ..., created_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., labels: _Optional[_Mapping[str, str]] = ..., limits: _Optional[_Union[ResourceLimits, _Mapping]] = ..., image: _Optional[str] = ..., status_message: _Optional[str] = ..., agent_type: _Optional[str] = ..., task: _Optional[_Union[TaskContext, _Mapping]] = ..., session_id: _Optional[str] = ..., mounts: _Optional[_Iterable[_Union[MountPreview, _Mapping]]] = ..., session_ids: _Optional[_Iterable[str]] = ..., provider_details: _Optional[_Mapping[str, str]] = ...) -> None: ...

class WorkspaceDigest(_message.Message):
    __slots__ = ["body", "section_key", "summary", "updated_at"]
    BODY_FIELD_NUMBER: _ClassVar[int]
    SECTION_KEY_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    body: str
    section_key: str
    summary: str
    updated_at: _timestamp_pb2.Timestamp
    def __init__(self, section_key: _Optional[str] = ..., summary: _Optional[str] = ..., body: _Optional[str] = ..., updated_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class WorkspaceStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class SessionStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ProvisioningStage(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class DigestSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
