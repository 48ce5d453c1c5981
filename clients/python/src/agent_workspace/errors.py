"""Exceptions: ``AgentWorkspaceError`` and one subclass per ``agentworkspace.v1.ErrorReason``.

The subclasses are generated from the proto's enum (``_gen/reasons.py``, by scripts/gen-python.sh),
so a reason cannot exist in the server and not here. Each is named after its reason in CamelCase
without an "Error" suffix, as google-api-core names its ``NotFound``: ``FILE_NOT_FOUND`` is
``FileNotFound``, ``NOT_A_DIRECTORY`` is ``NotADirectory``, ``CANCELLED`` is ``Cancelled``; none
shadows a Python builtin (``FileNotFoundError``, ``NotADirectoryError``) or ``asyncio.CancelledError``,
and none derives from them: catching ``FileNotFoundError`` does not catch the server's
``FileNotFound``.

The detail comes from the ``grpc-status-details-bin`` trailer, a google.rpc.Status whose details
hold one ``agentworkspace.v1.ErrorDetail``.
"""
from typing import Dict, Optional, Type

import grpc

from ._error_base import AgentWorkspaceError
from ._gen.agent_workspace_client.rpc_status_pb2 import Status
from ._gen.agentworkspace.v1 import errors_pb2
from ._gen.reasons import *  # noqa: F401,F403 (the classes are this module's API)
from ._gen.reasons import BY_NUMBER, __all__ as _reason_names

__all__ = ["AgentWorkspaceError", "error_class", "from_rpc_error", *_reason_names]

_PREFIX = "ERROR_REASON_"
_DETAIL_TYPE = errors_pb2.ErrorDetail.DESCRIPTOR.full_name
_BY_NAME: Dict[str, Type[AgentWorkspaceError]] = {cls.reason_name: cls for cls in BY_NUMBER.values()}


def error_class(reason: str) -> Type[AgentWorkspaceError]:
    """The exception class of a reason name (``"FILE_NOT_FOUND"`` or ``"ERROR_REASON_FILE_NOT_FOUND"``);
    ``AgentWorkspaceError`` itself for a name it does not know."""
    name = reason[len(_PREFIX):] if reason.startswith(_PREFIX) else reason
    return _BY_NAME.get(name, AgentWorkspaceError)


def _reason_name(number: int) -> str:
    try:
        return errors_pb2.ErrorReason.Name(number)[len(_PREFIX):]
    except ValueError:  # a reason newer than this client
        return f"UNKNOWN_{number}"


def _detail(error: grpc.RpcError) -> Optional[errors_pb2.ErrorDetail]:
    trailing = getattr(error, "trailing_metadata", None)
    trailers = trailing() if callable(trailing) else None
    raw = next((v for k, v in (trailers or ()) if k == "grpc-status-details-bin"), None)
    if not isinstance(raw, bytes):
        return None
    status = Status()
    try:
        status.ParseFromString(raw)
    except Exception:  # a malformed trailer leaves the error without a detail, never hides it
        return None
    for any_ in status.details:
        if any_.type_url.rsplit("/", 1)[-1] == _DETAIL_TYPE:
            detail = errors_pb2.ErrorDetail()
            try:
                detail.ParseFromString(any_.value)
            except Exception:
                return None
            return detail
    return None


def from_rpc_error(error: grpc.RpcError) -> AgentWorkspaceError:
    """Converts a grpcio error (sync or ``grpc.aio``) into the exception of its reason."""
    code_of, details_of = getattr(error, "code", None), getattr(error, "details", None)
    code: grpc.StatusCode = code_of() if callable(code_of) else grpc.StatusCode.UNKNOWN
    message: str = (details_of() if callable(details_of) else None) or ""
    detail = _detail(error)
    if detail is None or detail.reason == 0:
        return AgentWorkspaceError(message or code.name, code=code, detail=detail)
    cls = BY_NUMBER.get(detail.reason, AgentWorkspaceError)
    return cls(message or detail.message, code=code, reason=_reason_name(detail.reason), metadata=detail.metadata, detail=detail)


# Tracebacks and reprs name the classes where users import them from.
for _cls in BY_NUMBER.values():
    _cls.__module__ = __name__
AgentWorkspaceError.__module__ = __name__
