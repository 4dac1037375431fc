"""Optimisers as pure functions on pytrees of arrays or DTensors: SGD with momentum, and AdamW.

An optimiser is ``init(params) -> state`` and ``update(grads, state, params)
-> (new_params, new_state)`` (as optax and JAX's examples do).  Every step is
elementwise NumPy on the leaves, so for DTensors the state is sharded exactly
like the parameters (``np.zeros_like`` keeps placements) and an update issues
no collective.  Nothing is modified in place: new leaves come back.

Example:
    >>> import numpy as np
    >>> opt = adamw(0.1, weight_decay=0.0)
    >>> params = {"w": np.array([1.0, -2.0])}
    >>> state = opt.init(params)
    >>> params, state = opt.update({"w": np.array([0.5, -0.5])}, state, params)
    >>> params["w"].round(6).tolist(), state.step
    ([0.9, -1.9], 1)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .graph.pytree import flatten, unflatten

__all__ = ["AdamState", "Optimizer", "SgdState", "adamw", "sgd", "tree_map"]


def tree_map(fn: Callable[..., Any], tree: Any, *rest: Any) -> Any:
    """``fn`` applied leaf by leaf to ``tree`` and the trees in ``rest`` (of the same structure).

    Example:
        >>> tree_map(lambda a, b: a + b, {"x": 1, "y": [2]}, {"x": 10, "y": [20]})
        {'x': 11, 'y': [22]}
    """
    leaves, structure = flatten(tree)
    others = [flatten(t)[0] for t in rest]
    return unflatten(structure, [fn(x, *(o[i] for o in others)) for i, x in enumerate(leaves)])


@dataclass(frozen=True, slots=True)
class Optimizer:
    """A pair of pure functions: ``init(params) -> state``, ``update(grads, state, params) -> (params, state)``.

    Example:
        >>> import numpy as np
        >>> opt = sgd(0.5)
        >>> opt.update(np.ones(2), opt.init(np.zeros(2)), np.zeros(2))[0].tolist()
        [-0.5, -0.5]
    """

    init: Callable[[Any], Any]
    update: Callable[[Any, Any, Any], tuple[Any, Any]]


@dataclass(frozen=True, slots=True)
class SgdState:
    """The momentum buffers (None without momentum).

    Example:
        >>> import numpy as np
        >>> sgd(0.1, momentum=0.9).init(np.zeros(2)).momentum is not None
        True
    """

    momentum: Any


@dataclass(frozen=True, slots=True)
class AdamState:
    """The step count and the first and second moment estimates, shaped (and sharded) like the parameters.

    Example:
        >>> import numpy as np
        >>> state = adamw(0.1).init({"w": np.zeros(2)})
        >>> isinstance(state, AdamState), state.step
        (True, 0)
    """

    step: int
    mu: Any
    nu: Any


def _check_hyperparameters(name: str, **values: Any) -> None:
    """Every hyperparameter a real number >= 0 (bools refused), else a TypeError/ValueError naming it."""
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise TypeError(f"{name}: expected {key} as a real number, got {type(value).__name__} {value!r}")
        if not value >= 0:
            raise ValueError(f"{name}: expected {key} >= 0, got {value!r}")


def sgd(lr: float, momentum: float = 0.0, nesterov: bool = False, weight_decay: float = 0.0) -> Optimizer:
    """Stochastic gradient descent, with (Nesterov) momentum and L2 weight decay as PyTorch's ``SGD``.

    Example:
        >>> opt = sgd(0.5, momentum=0.9)
        >>> p, s = opt.update(np.array([1.0]), opt.init(np.array([2.0])), np.array([2.0]))
        >>> p.tolist()
        [1.5]
    """

    _check_hyperparameters("sgd", lr=lr, momentum=momentum, weight_decay=weight_decay)

    def init(params: Any) -> SgdState:
        return SgdState(tree_map(np.zeros_like, params) if momentum else None)

    def update(grads: Any, state: SgdState, params: Any) -> tuple[Any, SgdState]:
        if weight_decay:
            grads = tree_map(lambda g, p: g + weight_decay * p, grads, params)
        if not momentum:
            return tree_map(lambda p, g: p - lr * g, params, grads), state
        buf = tree_map(lambda b, g: momentum * b + g, state.momentum, grads)
        step = tree_map(lambda g, b: g + momentum * b, grads, buf) if nesterov else buf
        return tree_map(lambda p, d: p - lr * d, params, step), SgdState(buf)

    return Optimizer(init, update)


def adamw(lr: float, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, weight_decay: float = 0.01) -> Optimizer:
    """Adam with decoupled weight decay (Loshchilov and Hutter), as PyTorch's ``AdamW``.

    Example:
        >>> import numpy as np
        >>> opt = adamw(0.1, weight_decay=0.0)
        >>> p, s = opt.update(np.array([1.0]), opt.init(np.array([0.0])), np.array([0.0]))
        >>> p.round(6).tolist(), s.step
        ([-0.1], 1)
    """

    _check_hyperparameters("adamw", lr=lr, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay)

    def init(params: Any) -> AdamState:
        return AdamState(0, tree_map(np.zeros_like, params), tree_map(np.zeros_like, params))

    def update(grads: Any, state: AdamState, params: Any) -> tuple[Any, AdamState]:
        step = state.step + 1
        mu = tree_map(lambda m, g: b1 * m + (1 - b1) * g, state.mu, grads)
        nu = tree_map(lambda v, g: b2 * v + (1 - b2) * (g * g), state.nu, grads)
        scale_mu, scale_nu = 1.0 / (1 - b1 ** step), 1.0 / (1 - b2 ** step)

        def apply(p: Any, m: Any, v: Any) -> Any:
            return p * (1 - lr * weight_decay) - lr * (m * scale_mu) / (np.sqrt(v * scale_nu) + eps)

        return tree_map(apply, params, mu, nu), AdamState(step, mu, nu)

    return Optimizer(init, update)
