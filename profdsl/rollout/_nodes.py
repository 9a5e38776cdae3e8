"""Which Ray node an actor or this process is on, and running a function on a given node.

Rollout relocation moves engine traces on the node that wrote them; these helpers sit below both
``rollout_window`` and :mod:`profdsl.ray`. Ray is imported only when they run.
"""

from __future__ import annotations

from typing import Any

__all__ = ["current_node", "node_of", "run_on_node"]


def node_of(handle: Any) -> str | None:
    """The Ray node id an actor lives on, or None when it cannot be told."""
    try:
        from ray._private import state

        info = state.actors(actor_id=handle._actor_id.hex())
        return str(info["Address"]["NodeID"])
    except Exception:
        return None


def current_node() -> str | None:
    """This process's Ray node id, or None outside Ray."""
    try:
        import ray

        return str(ray.get_runtime_context().get_node_id())
    except Exception:
        return None


def run_on_node(node: str, fn: Any, *args: Any, timeout: float) -> Any:
    """Run ``fn(*args)`` as a Ray task pinned to ``node`` and wait for it (bounded)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    task = ray.remote(num_cpus=0)(fn).options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False)
    )
    return ray.get(task.remote(*args), timeout=timeout)
