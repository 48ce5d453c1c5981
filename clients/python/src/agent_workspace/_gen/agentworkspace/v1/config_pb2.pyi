from . import workspace_pb2 as _workspace_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AgentType(_message.Message):
    __slots__ = ["created_at", "description", "display_name", "id", "revision", "updated_at", "workspace"]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    DISPLAY_NAME_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    created_at: _timestamp_pb2.Timestamp
    description: str
    display_name: str
    id: str
    revision: int
    updated_at: _timestamp_pb2.Timestamp
    workspace: WorkspaceConfig
    def __init__(self, id: _Optional[str] = ..., display_name: _Optional[str] = ..., description: _Optional[str] = ..., workspace: _Optional[_Union[WorkspaceConfig, _Mapping]] = ..., revision: _Optional[int] = ..., created_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class CommandPolicy(_message.Message):
    __slots__ = ["allow", "default_action", "deny"]
    ALLOW_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_ACTION_FIELD_NUMBER: _ClassVar[int]
    DENY_FIELD_NUMBER: _ClassVar[int]
    allow: _containers.RepeatedScalarFieldContainer[str]
    default_action: str
    deny: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, default_action: _Optional[str] = ..., allow: _Optional[_Iterable[str]] = ..., deny: _Optional[_Iterable[str]] = ...) -> None: ...

class CreateAgentTypeRequest(_message.Message):
    __slots__ = ["agent_type"]
    AGENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    agent_type: AgentType
    def __init__(self, agent_type: _Optional[_Union[AgentType, _Mapping]] = ...) -> None: ...

class CreateAgentTypeResponse(_message.Message):
    __slots__ = ["agent_type"]
    AGENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    agent_type: AgentType
    def __init__(self, agent_type: _Optional[_Union[AgentType, _Mapping]] = ...) -> None: ...

class DeleteAgentTypeRequest(_message.Message):
    __slots__ = ["id"]
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class DeleteAgentTypeResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class GetAgentTypeRequest(_message.Message):
    __slots__ = ["id"]
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class GetAgentTypeResponse(_message.Message):
    __slots__ = ["agent_type"]
    AGENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    agent_type: AgentType
    def __init__(self, agent_type: _Optional[_Union[AgentType, _Mapping]] = ...) -> None: ...

class GetWorkspaceConfigRequest(_message.Message):
    __slots__ = ["agent_type_id"]
    AGENT_TYPE_ID_FIELD_NUMBER: _ClassVar[int]
    agent_type_id: str
    def __init__(self, agent_type_id: _Optional[str] = ...) -> None: ...

class GetWorkspaceConfigResponse(_message.Message):
    __slots__ = ["workspace_config"]
    WORKSPACE_CONFIG_FIELD_NUMBER: _ClassVar[int]
    workspace_config: WorkspaceConfig
    def __init__(self, workspace_config: _Optional[_Union[WorkspaceConfig, _Mapping]] = ...) -> None: ...

class GitPolicy(_message.Message):
    __slots__ = ["protected_branches"]
    PROTECTED_BRANCHES_FIELD_NUMBER: _ClassVar[int]
    protected_branches: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, protected_branches: _Optional[_Iterable[str]] = ...) -> None: ...

class ListAgentTypesRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ListAgentTypesResponse(_message.Message):
    __slots__ = ["agent_types"]
    AGENT_TYPES_FIELD_NUMBER: _ClassVar[int]
    agent_types: _containers.RepeatedCompositeFieldContainer[AgentType]
    def __init__(self, agent_types: _Optional[_Iterable[_Union[AgentType, _Mapping]]] = ...) -> None: ...

class NetworkConfig(_message.Message):
    __slots__ = ["allow", "mode"]
    ALLOW_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    allow: _containers.RepeatedScalarFieldContainer[str]
    mode: str
    def __init__(self, mode: _Optional[str] = ..., allow: _Optional[_Iterable[str]] = ...) -> None: ...

class RepoSource(_message.Message):
    __slots__ = ["branch", "type", "url"]
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    branch: str
    type: str
    url: str
    def __init__(self, type: _Optional[str] = ..., url: _Optional[str] = ..., branch: _Optional[str] = ...) -> None: ...

class SensitiveFiles(_message.Message):
    __slots__ = ["deny", "write_protected"]
    DENY_FIELD_NUMBER: _ClassVar[int]
    WRITE_PROTECTED_FIELD_NUMBER: _ClassVar[int]
    deny: _containers.RepeatedScalarFieldContainer[str]
    write_protected: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, deny: _Optional[_Iterable[str]] = ..., write_protected: _Optional[_Iterable[str]] = ...) -> None: ...

class UpdateAgentTypeRequest(_message.Message):
    __slots__ = ["agent_type"]
    AGENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    agent_type: AgentType
    def __init__(self, agent_type: _Optional[_Union[AgentType, _Mapping]] = ...) -> None: ...

class UpdateAgentTypeResponse(_message.Message):
    __slots__ = ["agent_type"]
    AGENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    agent_type: AgentType
    def __init__(self, agent_type: _Optional[_Union[AgentType, _Mapping]] = ...) -> None: ...

class UpdateWorkspaceConfigRequest(_message.Message):
    __slots__ = ["agent_type_id", "workspace_config"]
    AGENT_TYPE_ID_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_CONFIG_FIELD_NUMBER: _ClassVar[int]
    agent_type_id: str
    workspace_config: WorkspaceConfig
    def __init__(self, agent_type_id: _Optional[str] = ..., workspace_config: _Optional[_Union[WorkspaceConfig, _Mapping]] = ...) -> None: ...

class UpdateWorkspaceConfigResponse(_message.Message):
    __slots__ = ["workspace_config"]
    WORKSPACE_CONFIG_FIELD_NUMBER: _ClassVar[int]
    workspace_config: WorkspaceConfig
    def __init__(self, workspace_config: _Optional[_Union[WorkspaceConfig, _Mapping]] = ...) -> None: ...

class WorkspaceConfig(_message.Message):
    __slots__ = ["base_image", "checkout_on_start", "command_policy", "default_command_timeout_ms", "delete_after_idle_ms", "digest_overrides", "enabled", "engine_labels", "fallback_provider", "git", "max_command_timeout_ms", "max_processes", "mounts", "network", "pause_after_idle_ms", "process_idle_timeout_ms", "provider", "repo_source", "resource_limits", "runtime_class", "sensitive_files", "session_idle_timeout_ms", "setup_command_timeout_ms", "setup_commands", "tools", "warm_pool_size"]
    class EngineLabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    BASE_IMAGE_FIELD_NUMBER: _ClassVar[int]
    CHECKOUT_ON_START_FIELD_NUMBER: _ClassVar[int]
    COMMAND_POLICY_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_COMMAND_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    DELETE_AFTER_IDLE_MS_FIELD_NUMBER: _ClassVar[int]
    DIGEST_OVERRIDES_FIELD_NUMBER: _ClassVar[int]
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    ENGINE_LABELS_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_PROVIDER_FIELD_NUMBER: _ClassVar[int]
    GIT_FIELD_NUMBER: _ClassVar[int]
    MAX_COMMAND_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_PROCESSES_FIELD_NUMBER: _ClassVar[int]
    MOUNTS_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    PAUSE_AFTER_IDLE_MS_FIELD_NUMBER: _ClassVar[int]
    PROCESS_IDLE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    REPO_SOURCE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_LIMITS_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_CLASS_FIELD_NUMBER: _ClassVar[int]
    SENSITIVE_FILES_FIELD_NUMBER: _ClassVar[int]
    SESSION_IDLE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    SETUP_COMMANDS_FIELD_NUMBER: _ClassVar[int]
    SETUP_COMMAND_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    WARM_POOL_SIZE_FIELD_NUMBER: _ClassVar[int]
    base_image: str
    checkout_on_start: bool
    command_policy: CommandPolicy
    default_command_timeout_ms: int
    delete_after_idle_ms: int
    digest_overrides: _containers.RepeatedCompositeFieldContainer[_workspace_pb2.WorkspaceDigest]
    enabled: bool
    engine_labels: _containers.ScalarMap[str, str]
    fallback_provider: str
    git: GitPolicy
    max_command_timeout_ms: int
    max_processes: int
    mounts: _containers.RepeatedCompositeFieldContainer[_workspace_pb2.HostMount]
    network: NetworkConfig
    pause_after_idle_ms: int
    process_idle_timeout_ms: int
    provider: str
    repo_source: RepoSource
    resource_limits: _workspace_pb2.ResourceLimits
    runtime_class: str
    sensitive_files: SensitiveFiles
    session_idle_timeout_ms: int
    setup_command_timeout_ms: int
    setup_commands: _containers.RepeatedScalarFieldContainer[str]
    tools: _containers.RepeatedScalarFieldContainer[str]
    warm_pool_size: int
    def __init__(self, enabled: bool = ..., repo_source: _Optional[_Union[RepoSource, _Mapping]] = ..., tools: _Optional[_Iterable[str]] = ..., resource_limits: _Optional[_Union[_workspace_pb2.ResourceLimits, _Mapping]] = ..., checkout_on_start: bool = ..., base_image: _Optional[str] = ..., setup_commands: _Optional[_Iterable[str]] = ..., provider: _Optional[str] = ..., fallback_provider: _Optional[str] = ..., network: _Optional[_Union[NetworkConfig, _Mapping]] = ..., warm_pool_size: _Optional[int] = ..., default_command_timeout_ms: _Optional[int] = ..., max_command_timeout_ms: _Optional[int] = ..., setup_command_timeout_ms: _Optional[int] = ..., session_idle_timeout_ms: _Optional[int] = ..., command_policy: _Optional[_Union[CommandPolicy, _Mapping]] = ..., sensitive_files: _Optional[_Union[SensitiveFiles, _Mapping]] = ..., git: _Optional[_Union[GitPolicy, _Mapping]] = ..., mounts: _Optional[_Iterable[_Union[_workspace_pb2.HostMount, _Mapping]]] = ..., digest_overrides: _Optional[_Iterable[_Union[_workspace_pb2.WorkspaceDigest, _Mapping]]] = ..., max_processes: _Optional[int] = ..., process_idle_timeout_ms: _Optional[int] = ..., pause_after_idle_ms: _Optional[int] = ..., delete_after_idle_ms: _Optional[int] = ..., engine_labels: _Optional[_Mapping[str, str]] = ..., runtime_class: _Optional[str] = ...) -> None: ...
