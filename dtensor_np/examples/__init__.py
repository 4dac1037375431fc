"""Runnable examples: ``python -m dtensor_np.examples.tp_mlp`` (simulated) or under ``mpiexec -n 4``."""
