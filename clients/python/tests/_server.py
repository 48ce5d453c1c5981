"""The server the end-to-end tests drive: AGENT_WORKSPACE_URL and AGENT_WORKSPACE_API_KEY, set by
test/python-client.test.ts (a real server on a real socket). Without them the tests fail; they
never skip."""
import os
import uuid

URL = os.environ.get("AGENT_WORKSPACE_URL", "")
API_KEY = os.environ.get("AGENT_WORKSPACE_API_KEY", "")


def require_server() -> None:
    if not URL or not API_KEY:
        raise RuntimeError("set AGENT_WORKSPACE_URL and AGENT_WORKSPACE_API_KEY to a running server and one of its API keys")


def unique(prefix: str) -> str:
    """A fresh agent type id, so the suite can run twice against one server."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"
