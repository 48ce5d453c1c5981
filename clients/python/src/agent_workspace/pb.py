"""The generated protobuf modules under short names, for building and reading messages:
``pb.tool.BashResponse``, ``pb.workspace.SESSION_STATUS_ACTIVE``, ``pb.config.WorkspaceConfig``."""
from ._gen.agentworkspace.v1 import audit_pb2 as audit
from ._gen.agentworkspace.v1 import config_pb2 as config
from ._gen.agentworkspace.v1 import errors_pb2 as errors
from ._gen.agentworkspace.v1 import git_pb2 as git
from ._gen.agentworkspace.v1 import process_pb2 as process
from ._gen.agentworkspace.v1 import tool_pb2 as tool
from ._gen.agentworkspace.v1 import workspace_pb2 as workspace

__all__ = ["audit", "config", "errors", "git", "process", "tool", "workspace"]
