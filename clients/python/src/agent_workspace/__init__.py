"""Python client of agent-workspace: sandboxed workspaces and coding tools for AI agents.

    from agent_workspace import AgentWorkspace

    with AgentWorkspace("http://127.0.0.1:8080", api_key=KEY) as client:
        with client.start_session("coder", task={"repository_url": url}) as session:
            session.wait_ready()
            print(session.workspace.bash("pytest -q").stdout)

Sync API here (grpcio); asyncio in ``agent_workspace.aio``; exceptions in
``agent_workspace.errors``; the generated messages in ``agent_workspace.pb`` (``pb.tool``,
``pb.workspace``, …).
"""
from . import errors, pb
from ._common import BashOutput, OutputChunk
from .client import AgentWorkspace, Git, Processes, Session, Workspace
from .errors import AgentWorkspaceError
from .streams import BashStream, GrepStream, Stream

__version__ = "0.1.0"

__all__ = [
    "AgentWorkspace",
    "AgentWorkspaceError",
    "BashOutput",
    "BashStream",
    "Git",
    "GrepStream",
    "OutputChunk",
    "Processes",
    "Session",
    "Stream",
    "Workspace",
    "errors",
    "pb",
]
