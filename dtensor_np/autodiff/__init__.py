"""Automatic differentiation of NumPy programs, on plain arrays and on DTensors (JAX-style transformations).

``grad_graph`` is the graph transformation; ``value_and_grad``, ``grad`` and
``vjp`` are its eager forms.  VJP rules live in :mod:`.rules`.

Example:
    >>> import numpy as np, dtensor_np as dt
    >>> dt.grad(lambda x: np.sum(x * x))(np.array([1.0, 2.0])).tolist()
    [2.0, 4.0]
"""

from .api import grad, value_and_grad, vjp
from .rules import VJP_RULES, defvjp, vjp_rule
from .transform import grad_graph

__all__ = ["grad", "value_and_grad", "vjp", "grad_graph", "defvjp", "vjp_rule", "VJP_RULES"]
