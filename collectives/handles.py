"""``Handle``: the result of an asynchronous collective, available after ``wait()``."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .types import Array

__all__ = ["Handle"]


class Handle:
    """An issued collective; ``wait()`` completes it and returns its result.

    ``wait()`` may be called more than once; later calls return the same dict.

    Example:
        >>> import numpy as np
        >>> from collectives import SimulatedBackend
        >>> handle = SimulatedBackend(2).iall_reduce({0: np.ones(2), 1: np.ones(2)}, ((0, 1),))
        >>> handle.wait()[0]
        array([2., 2.])
    """

    __slots__ = ("_request", "_finish", "_result", "_keepalive")

    def __init__(
        self,
        finish: Callable[[], dict[int, Array]],
        request: Any = None,
        keepalive: tuple[Any, ...] = (),
    ) -> None:
        """``finish`` builds the result once ``request`` (an MPI request, or None) completes.

        ``keepalive`` holds the buffers MPI reads or writes until then.
        """
        self._request = request
        self._finish: Callable[[], dict[int, Array]] | None = finish
        self._result: dict[int, Array] | None = None
        self._keepalive = keepalive

    @classmethod
    def completed(cls, result: dict[int, Array]) -> Handle:
        """A handle whose result is already known (the simulated backend)."""
        handle = cls(_no_finish)
        handle._finish = None
        handle._result = result
        return handle

    def wait(self) -> dict[int, Array]:
        """Block until the collective has finished and return ``{rank: array}``."""
        finish = self._finish
        if finish is not None:
            if self._request is not None:
                self._request.Wait()
            self._result = finish()
            self._finish = None
            self._request = None
            self._keepalive = ()
        assert self._result is not None
        return self._result


def _no_finish() -> dict[int, Array]:
    raise AssertionError("unreachable")  # pragma: no cover
