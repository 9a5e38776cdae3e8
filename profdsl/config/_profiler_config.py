# mypy: disable-error-code="misc"
# (the attrs mypy plugin does not read attrs.Converter objects, which name their own field)
"""``ProfilerConfig``, the configuration of one role (re-exported by :mod:`profdsl.config` and
:mod:`profdsl`): its fields, reading it from a file, and merging two (``union`` and
``intersect``).

The merge rules, field by field, are documented in ``docs/configuration.md``. In short, the merge
is on what each config *selects*, not on its raw fields, so that an empty ``ranks`` (which means
rank 0) or an empty ``contents`` (which means CPU and CUDA) keep their meaning after a merge. The
classes a config holds are :mod:`profdsl.config._options`'s, below this module.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

import attrs

from profdsl.config._checks import (
    MAX_WIDE_INDEX,
    boolean,
    named,
    refuse,
    require_choice,
    text_without_nul,
    to_int_set,
    to_nested,
    valid,
)
from profdsl.config._options import (
    TOOLS,
    AutoCapture,
    FinishHook,
    Metrics,
    OnDemand,
    RolloutOptions,
    TorchOptions,
    _Mappable,
)
from profdsl.config.selector import parse_selector
from profdsl.errors import ConfigError

__all__ = ["ProfilerConfig"]

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def _save_path(where: str, value: object) -> str:
    """A local folder, made absolute against the working directory of the process that builds the
    config: a later ``os.chdir``, or a Ray worker started elsewhere, still writes to it."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value.strip():
        refuse(where, "a non-empty local path", value)
    text_without_nul(where, value)
    if _URL.match(value):
        raise ConfigError(
            f"{where} must be a local path, got the URL {value!r}: traces are "
            "written locally and uploaded by the finish hook (FinishHook.cmd)"
        )
    return os.path.abspath(value)


def _select(where: str, value: object) -> str | None:
    """A rank selector, stored in its canonical spelling (``parse_selector(...).format()``)."""
    return None if value is None else parse_selector(value, where=where).format()


def _folder(label: str, value: object) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        refuse(label, "a folder path", value, optional=True)
    text_without_nul(label, value, optional=True)


@attrs.frozen(kw_only=True)
class ProfilerConfig(_Mappable):
    """What to profile (steps, ranks, tool), where traces go, and the finish hook.

    ``steps`` are RL training steps; empty ``ranks`` with ``all_ranks=False`` selects rank 0.
    ``select`` chooses ranks by their place in the parallel layout instead (``"tp == 0 and pp in
    {0, last}"``, grammar in :mod:`profdsl.config.selector`); it excludes ``ranks`` and
    ``all_ranks``.
    ``discrete=True`` gives each outermost stage its own trace; otherwise one trace spans a step
    (or a run of consecutive steps with ``continuous_steps``). ``on_demand`` says how a running
    job takes capture requests; ``auto`` (which needs ``metrics.enabled``) traces the step after
    a slow one by itself (``docs/on-demand.md``).

    Examples:
        >>> cfg = ProfilerConfig.from_mapping({"enable": True, "steps": [3], "torch": {"contents": ["cpu"]}})
        >>> ProfilerConfig.from_mapping(cfg.to_mapping()) == cfg
        True
    """

    #: Extensions :meth:`from_file` reads as YAML (anything else is read as JSON).
    YAML_SUFFIXES: ClassVar[tuple[str, ...]] = (".yaml", ".yml")

    enable: bool = attrs.field(default=False, validator=boolean)
    tool: Literal["torch", "nsys"] = attrs.field(default="torch", validator=valid(require_choice, TOOLS))
    steps: tuple[int, ...] = attrs.field(default=(), converter=named(to_int_set, maximum=MAX_WIDE_INDEX))
    ranks: tuple[int, ...] = attrs.field(default=(), converter=named(to_int_set, maximum=MAX_WIDE_INDEX - 1))
    all_ranks: bool = attrs.field(default=False, validator=boolean)
    select: str | None = attrs.field(default=None, converter=named(_select))
    save_path: str = attrs.field(default="profiles", converter=named(_save_path))
    discrete: bool = attrs.field(default=False, validator=boolean)
    continuous_steps: bool = attrs.field(default=False, validator=boolean)
    nvtx: bool = attrs.field(default=False, validator=boolean)
    torch: TorchOptions = attrs.field(factory=TorchOptions, converter=named(to_nested, TorchOptions))
    relocate_results: bool = attrs.field(default=True, validator=boolean)
    finish_hook: FinishHook = attrs.field(factory=FinishHook, converter=named(to_nested, FinishHook))
    nsys_report_dir: str | None = attrs.field(default=None, validator=valid(_folder))
    rollout: RolloutOptions = attrs.field(factory=RolloutOptions, converter=named(to_nested, RolloutOptions))
    metrics: Metrics = attrs.field(factory=Metrics, converter=named(to_nested, Metrics))
    on_demand: OnDemand = attrs.field(factory=OnDemand, converter=named(to_nested, OnDemand))
    auto: AutoCapture | None = attrs.field(default=None, converter=named(to_nested, AutoCapture, optional=True))

    def __attrs_post_init__(self) -> None:
        if self.auto is not None and not self.metrics.enabled:
            raise ConfigError(
                "ProfilerConfig.auto needs the always-on metrics, which it compares step "
                "by step: set metrics=Metrics(enabled=True) (got metrics.enabled=False)"
            )
        if self.select is not None and (self.ranks or self.all_ranks):
            given = f"ranks={list(self.ranks)}" if self.ranks else "all_ranks=True"
            raise ConfigError(
                f"ProfilerConfig.select ({self.select!r}) and {given} both choose the "
                "profiled ranks: give one (a selector can name ranks: 'rank in {0, 8}')"
            )

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], *, section: str | None = None) -> ProfilerConfig:
        """Read a YAML (``.yaml``/``.yml``) or JSON (``.json``) file; one named otherwise (a
        ``/dev/fd/N`` of a shell's ``<(...)``) is JSON when it starts with ``{``, else YAML.

        Args:
            path: the file.
            section: a dotted key selecting a nested block, e.g. ``"actor.profiler"``.

        Raises:
            ConfigError: unreadable file, bad syntax, missing section or invalid values.
        """
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read profiler config {str(path)!r}: {exc}") from exc
        try:
            if _is_yaml(path, text):
                import yaml  # type: ignore[import-untyped]  # lazily: only file configs need it

                data = yaml.safe_load(text)
            else:
                data = json.loads(text)
        except Exception as exc:  # yaml.YAMLError and json.JSONDecodeError share no base
            raise ConfigError(f"cannot parse profiler config {str(path)!r}: {exc}") from exc
        where = str(path)
        for key in section.split(".") if section else ():
            if not isinstance(data, Mapping) or key not in data:
                raise ConfigError(f"{where} has no key {key!r}")
            data, where = data[key], f"{where}:{key}"
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where} must hold a mapping of profiler settings, got {data!r}")
        return cls.from_mapping(data)  # type: ignore[no-any-return]

    def union(self, other: ProfilerConfig) -> ProfilerConfig:
        """A config that profiles whatever either config profiles (see ``docs/configuration.md``)."""
        a, b = self, other
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
        return attrs.evolve(a, ranks=ranks, all_ranks=all_ranks, **_joined(a, b, union=True))

    def intersect(self, other: ProfilerConfig) -> ProfilerConfig:
        """A config that profiles only what both configs profile (see ``docs/configuration.md``)."""
        a, b = self, other
        _same_tool(a, b)
        if a.select is None and b.select is None:
            return _intersect_lists(a, b)
        # Either chooses ranks by a selector: the ranks both select, as one (``and`` is exact).
        every: dict[str, Any] = {"select": None, "ranks": (), "all_ranks": True}
        terms = [*_rank_terms(a), *_rank_terms(b)]
        merged = _intersect_lists(attrs.evolve(a, **every), attrs.evolve(b, **every))
        return attrs.evolve(merged, select=" and ".join(terms) if terms else None, all_ranks=not terms)


def _is_yaml(path: Path, text: str) -> bool:
    """Whether a config file is read as YAML: by its suffix, else by its first character."""
    suffix = path.suffix.lower()
    if suffix in ProfilerConfig.YAML_SUFFIXES or suffix == ".json":
        return suffix != ".json"
    return not text.lstrip().startswith("{")


# -- union and intersect ---------------------------------------------------------------------------

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


#: The switches a union turns on when either config does, an intersect when both do.
_SWITCHES = ("discrete", "continuous_steps", "nvtx", "relocate_results")


def _joined(a: ProfilerConfig, b: ProfilerConfig, union: bool) -> dict[str, Any]:
    """The fields a union (``union``) or an intersect of ``a`` and ``b`` takes from either (from
    both): steps, switches, the torch options and the finish hook; not ``enable`` nor the ranks."""
    join, sets = (any, frozenset.union) if union else (all, frozenset.intersection)
    ta, tb, ha, hb = a.torch, b.torch, a.finish_hook, b.finish_hook
    if union:  # no schedule records every mini-batch, which contains any schedule's windows
        schedule = None if ta.schedule is None or tb.schedule is None else ta.schedule
        cmd = _first(ha.cmd, hb.cmd)
    else:
        schedule, cmd = _first(ta.schedule, tb.schedule), ha.cmd if ha.cmd == hb.cmd else None
    return dict(
        steps=sorted(sets(frozenset(a.steps), frozenset(b.steps))),
        torch=attrs.evolve(
            ta,
            contents=_contents(ta.contents, tb.contents, sets),
            schedule=schedule,
            all_threads=join((ta.all_threads, tb.all_threads)),
        ),
        finish_hook=attrs.evolve(
            ha,
            cmd=cmd,
            ranks=sorted(sets(frozenset(ha.ranks), frozenset(hb.ranks))),
            all_ranks=join((ha.all_ranks, hb.all_ranks)),
            timeout_s=(max if union else min)(ha.timeout_s, hb.timeout_s),
            background=join((ha.background, hb.background)),
        ),
        **{name: join((getattr(a, name), getattr(b, name))) for name in _SWITCHES},
    )


def _intersect_lists(a: ProfilerConfig, b: ProfilerConfig) -> ProfilerConfig:
    """:meth:`ProfilerConfig.intersect` of two configs that choose ranks by list (or all)."""
    if a.all_ranks != b.all_ranks:  # every rank ∩ a selection = that selection
        ranks = b.ranks if a.all_ranks else a.ranks
    else:
        ranks = _ranks(a.ranks, b.ranks, frozenset.intersection)
    # Disjoint rank lists cannot be written as a rank list (empty means rank 0): disable.
    disjoint = not (a.all_ranks or b.all_ranks) and not ranks and bool(a.ranks or b.ranks)
    enable = a.enable and b.enable and not disjoint
    return attrs.evolve(
        a, enable=enable, ranks=ranks, all_ranks=a.all_ranks and b.all_ranks, **_joined(a, b, union=False)
    )
