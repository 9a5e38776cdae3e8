"""``ProfilerConfig.union`` and ``intersect``: merging two role configs.

The rules, field by field, are documented in ``docs/configuration.md``. In short, the merge is
on what each config *selects*, not on its raw fields, so that an empty ``ranks`` (which means
rank 0) or an empty ``contents`` (which means CPU and CUDA) keep their meaning after a merge.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from profdsl.errors import ConfigError

if TYPE_CHECKING:
    from profdsl.config._options import FinishHook, ProfilerConfig, TorchOptions

T = TypeVar("T")
_SetOp = Callable[[frozenset[Any], frozenset[Any]], frozenset[Any]]


def _same_tool(a: ProfilerConfig, b: ProfilerConfig) -> None:
    if a.tool != b.tool:
        raise ConfigError(f"cannot merge profiler configs of different tools: {a.tool!r} and {b.tool!r}")


def _ranks(a: tuple[int, ...], b: tuple[int, ...], op: _SetOp) -> tuple[int, ...]:
    # An empty tuple selects rank 0; keep "both empty" empty so the merge is idempotent.
    if not a and not b:
        return ()
    return tuple(sorted(op(frozenset(a or (0,)), frozenset(b or (0,)))))


def _contents(a: frozenset[str], b: frozenset[str], op: _SetOp) -> frozenset[str]:
    # Empty contents means CPU and CUDA; CPU is always on, so {} behaves as {"cuda"}.
    if not a and not b:
        return frozenset()
    merged: frozenset[str] = op(a or frozenset({"cuda"}), b or frozenset({"cuda"}))
    return merged or frozenset({"cpu"})  # an empty result would wrongly switch CUDA back on


def _rank_terms(c: ProfilerConfig) -> list[str]:
    """``c``'s rank choice as selector terms (none: every rank)."""
    if c.select is not None:
        return [c.select]
    if c.all_ranks:
        return []
    return [f"rank in {{{', '.join(map(str, c.ranks or (0,)))}}}"]


def _select_intersect(a: ProfilerConfig, b: ProfilerConfig) -> dict[str, Any]:
    """The ranks both select, as a selector, when either chooses ranks by one (``and`` is exact)."""
    terms = [*_rank_terms(a), *_rank_terms(b)]
    return {"select": " and ".join(terms) if terms else None, "ranks": (), "all_ranks": not terms}


def _select_union(a: ProfilerConfig, b: ProfilerConfig) -> None:
    """A selector has no ``or``: a union is written only when both choose ranks alike."""
    if (a.select, a.ranks, a.all_ranks) != (b.select, b.ranks, b.all_ranks):
        raise ConfigError(
            f"cannot merge the rank choices select={a.select!r} (ranks={list(a.ranks)}, all_ranks="
            f"{a.all_ranks}) and select={b.select!r} (ranks={list(b.ranks)}, all_ranks={b.all_ranks}) "
            "by union: a selector has no 'or'; give both roles the same selector"
        )


def _first(a: T | None, b: T | None) -> T | None:
    return a if a is not None else b


def _torch_union(a: TorchOptions, b: TorchOptions) -> TorchOptions:
    # No schedule records every mini-batch, which contains any schedule's windows.
    schedule = None if a.schedule is None or b.schedule is None else a.schedule
    return attrs.evolve(
        a,
        contents=_contents(a.contents, b.contents, frozenset.union),
        schedule=schedule,
        all_threads=a.all_threads or b.all_threads,
    )


def _torch_intersect(a: TorchOptions, b: TorchOptions) -> TorchOptions:
    return attrs.evolve(
        a,
        contents=_contents(a.contents, b.contents, frozenset.intersection),
        schedule=_first(a.schedule, b.schedule),
        all_threads=a.all_threads and b.all_threads,
    )


def _hook_union(a: FinishHook, b: FinishHook) -> FinishHook:
    return attrs.evolve(
        a,
        cmd=_first(a.cmd, b.cmd),
        ranks=sorted(set(a.ranks) | set(b.ranks)),
        all_ranks=a.all_ranks or b.all_ranks,
        timeout_s=max(a.timeout_s, b.timeout_s),
        background=a.background or b.background,
    )


def _hook_intersect(a: FinishHook, b: FinishHook) -> FinishHook:
    return attrs.evolve(
        a,
        cmd=a.cmd if a.cmd == b.cmd else None,
        ranks=sorted(set(a.ranks) & set(b.ranks)),
        all_ranks=a.all_ranks and b.all_ranks,
        timeout_s=min(a.timeout_s, b.timeout_s),
        background=a.background and b.background,
    )


def union(a: ProfilerConfig, b: ProfilerConfig) -> ProfilerConfig:
    """Profile every (step, rank) that ``a`` or ``b`` profiles; see the module docstring."""
    _same_tool(a, b)
    if a.enable != b.enable:  # a disabled config selects nothing and contributes nothing
        return a if a.enable else b
    if bool(a.steps) != bool(b.steps):  # without steps a config selects no rank either
        ranks, all_ranks = (a.ranks, a.all_ranks) if a.steps else (b.ranks, b.all_ranks)
        a = attrs.evolve(a, select=(a if a.steps else b).select, ranks=(), all_ranks=False)
    elif a.select is not None or b.select is not None:
        _select_union(a, b)
        ranks, all_ranks = a.ranks, a.all_ranks
    else:
        ranks, all_ranks = _ranks(a.ranks, b.ranks, frozenset.union), a.all_ranks or b.all_ranks
    return attrs.evolve(
        a,
        steps=sorted(set(a.steps) | set(b.steps)),
        ranks=ranks,
        all_ranks=all_ranks,
        discrete=a.discrete or b.discrete,
        continuous_steps=a.continuous_steps or b.continuous_steps,
        nvtx=a.nvtx or b.nvtx,
        relocate_results=a.relocate_results or b.relocate_results,
        torch=_torch_union(a.torch, b.torch),
        finish_hook=_hook_union(a.finish_hook, b.finish_hook),
    )


def intersect(a: ProfilerConfig, b: ProfilerConfig) -> ProfilerConfig:
    """Profile only the (step, rank) pairs that both ``a`` and ``b`` profile."""
    _same_tool(a, b)
    if a.select is not None or b.select is not None:
        return attrs.evolve(
            _intersect_lists(
                attrs.evolve(a, select=None, ranks=(), all_ranks=True),
                attrs.evolve(b, select=None, ranks=(), all_ranks=True),
            ),
            **_select_intersect(a, b),
        )
    return _intersect_lists(a, b)


def _intersect_lists(a: ProfilerConfig, b: ProfilerConfig) -> ProfilerConfig:
    """``intersect`` of two configs that choose ranks by list (or all)."""
    if a.all_ranks or b.all_ranks:  # every rank ∩ a selection = that selection
        all_ranks = a.all_ranks and b.all_ranks
        if all_ranks:
            ranks = _ranks(a.ranks, b.ranks, frozenset.intersection)
        else:
            ranks = b.ranks if a.all_ranks else a.ranks
        disjoint = False
    else:
        all_ranks = False
        ranks = _ranks(a.ranks, b.ranks, frozenset.intersection)
        # Disjoint rank lists cannot be written as a rank list (empty means rank 0): disable.
        disjoint = not ranks and bool(a.ranks or b.ranks)
    return attrs.evolve(
        a,
        enable=a.enable and b.enable and not disjoint,
        steps=sorted(set(a.steps) & set(b.steps)),
        ranks=ranks,
        all_ranks=all_ranks,
        discrete=a.discrete and b.discrete,
        continuous_steps=a.continuous_steps and b.continuous_steps,
        nvtx=a.nvtx and b.nvtx,
        relocate_results=a.relocate_results and b.relocate_results,
        torch=_torch_intersect(a.torch, b.torch),
        finish_hook=_hook_intersect(a.finish_hook, b.finish_hook),
    )
