"""The base exception of the client (in its own module so the generated reason classes can derive
from it without importing agent_workspace.errors, which imports them)."""
from typing import TYPE_CHECKING, ClassVar, Dict, Mapping, Optional

import grpc

if TYPE_CHECKING:
    from ._gen.agentworkspace.v1.errors_pb2 import ClosestMatch, ErrorDetail, PartialOutput


class AgentWorkspaceError(Exception):
    """A call the server (or the channel) failed.

    Attributes:
        code: the gRPC status code (``grpc.StatusCode.NOT_FOUND``, …).
        reason: the stable ``agentworkspace.v1.ErrorReason`` name without its prefix
            (``"FILE_NOT_FOUND"``); ``"UNSPECIFIED"`` when the error carried no ErrorDetail (the
            client's own deadline, a connection that failed, a proxy's answer).
        message: the server's message, the same as ``str(error)``.
        metadata: what failed (``path``, ``patch_index``, ``command``, …), from the ErrorDetail.
        closest_match: for ``FIND_NOT_FOUND``, the region of the file most like the text searched.
        partial_output: for ``COMMAND_TIMEOUT``, what the command wrote before it was killed.
        detail: the whole ``agentworkspace.v1.ErrorDetail``, or None.

    The subclass is chosen by the reason (``FileNotFound``, ``FindNotUnique``, …: one per
    ErrorReason, see agent_workspace.errors); errors without a detail are this class itself.
    """

    #: The ErrorReason name of the class ("" for the base class, which serves every reason).
    reason_name: ClassVar[str] = ""
    #: The ErrorReason number of the class (0 for the base class).
    reason_number: ClassVar[int] = 0

    def __init__(
        self,
        message: str,
        *,
        code: grpc.StatusCode = grpc.StatusCode.UNKNOWN,
        reason: Optional[str] = None,
        metadata: Optional[Mapping[str, str]] = None,
        detail: "Optional[ErrorDetail]" = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.reason: str = reason or self.reason_name or "UNSPECIFIED"
        self.metadata: Dict[str, str] = dict(metadata or {})
        self.detail = detail

    @property
    def closest_match(self) -> "Optional[ClosestMatch]":
        d = self.detail
        return d.closest_match if d is not None and d.HasField("closest_match") else None

    @property
    def partial_output(self) -> "Optional[PartialOutput]":
        d = self.detail
        return d.partial_output if d is not None and d.HasField("partial_output") else None

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code.name}, reason={self.reason}, message={self.message!r})"
