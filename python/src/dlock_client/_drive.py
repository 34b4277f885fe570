"""How a shell runs a flow (:mod:`._effects`): :class:`Driver` steps it, and :func:`drive`
(blocking) or :func:`adrive` (asyncio) is the one loop that serves its requests. The same
loops run a generator of *steps* (calls, awaited in asyncio): the I/O of an exchange whose
logic is written once (a watchdog pipeline, a cluster's redirected wait).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, Generic, Protocol, TypeVar

from .errors import ClientClosedError

T = TypeVar("T")

#: A generator of steps: each yielded call is made (and awaited in asyncio), its result sent
#: back (its exception thrown in).
Steps = Generator[Callable[[], Any], Any, T]


class Closable(Protocol):
    """What a driver asks of the client whose flow it runs."""

    _closed: bool

    def _closed_error(self) -> ClientClosedError: ...


class Driver(Generic[T]):
    """Runs a flow (or any generator of steps) for a shell: iterating yields the flow's
    requests; the shell (:func:`drive` or :func:`adrive`, the one loop of each kind) hands
    each one's outcome back with :meth:`ok` or :meth:`fail` and finds the flow's result in
    :attr:`value`. With a `client`, a flow that fails because the client closed meanwhile raises
    ``ClientClosedError``."""

    def __init__(self, flow: Generator[Any, Any, T], client: Closable | None = None) -> None:
        self._flow = flow
        self._client = client
        self._started = False
        self._result: Any = None
        self._error: BaseException | None = None
        self.value: T

    def __iter__(self) -> Driver[T]:
        return self

    def __next__(self) -> Any:
        try:
            if not self._started:
                self._started = True
                return next(self._flow)
            error, self._error = self._error, None
            if error is not None:
                return self._flow.throw(error)
            return self._flow.send(self._result)
        except StopIteration as stop:
            self.value = stop.value
            raise StopIteration from None
        except Exception as error:
            client = self._client
            if client is not None and client._closed and not isinstance(error,
                                                                      ClientClosedError):
                raise client._closed_error() from error
            raise

    def ok(self, result: Any) -> None:
        self._result = result

    def fail(self, error: BaseException) -> None:
        self._error = error


def drive(run: Driver[T], do: Callable[[Any], Any]) -> T:
    """Runs a flow, serving each request with `do` (blocking)."""
    for op in run:
        try:
            run.ok(do(op))
        except BaseException as error:
            run.fail(error)
    return run.value


async def adrive(run: Driver[T], do: Callable[[Any], Awaitable[Any]]) -> T:
    """Runs a flow, serving each request with `do` (awaited)."""
    for op in run:
        try:
            run.ok(await do(op))
        except BaseException as error:
            run.fail(error)
    return run.value


def run_steps(steps: Steps[T]) -> T:
    """Runs a generator of steps (blocking calls)."""
    return drive(Driver(steps), _call)


async def arun_steps(steps: Generator[Callable[[], Awaitable[Any]], Any, T]) -> T:
    """Runs a generator of steps (calls answering awaitables)."""
    return await adrive(Driver(steps), _call)


def _call(step: Callable[[], Any]) -> Any:
    return step()
