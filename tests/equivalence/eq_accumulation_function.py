"""The ``ad.function`` accumulation case's node (``eq_accumulation.run_function_node``), as the pool runs a module."""
from eq_accumulation import run_function_node as run_node  # noqa: F401
