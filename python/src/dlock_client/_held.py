"""What a hold is, apart from how it is released (sync or awaited) and its `lost` event."""

from __future__ import annotations

from typing import Optional

from ._protocol import Kind, Request


class HeldBase:
    """``token``: the fencing token (with ``fence=True``); ``count``: the hold count (or the
    permits this acquire took, for a semaphore); ``owner``: who holds it on the server."""

    def __init__(self, request: Request, owner: str, count: int, token: Optional[int]) -> None:
        self._request = request
        self.key = request.key
        self.kind: Kind = request.kind
        self.owner = owner
        self.count = request.count if request.kind == "semaphore" else count
        self.token = token
        self._released = False

    @property
    def released(self) -> bool:
        return self._released

    def _lost_now(self) -> bool:
        raise NotImplementedError

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.kind} {self.key!r} owner={self.owner!r} "
                f"count={self.count} token={self.token} lost={self._lost_now()} "
                f"released={self._released})")
