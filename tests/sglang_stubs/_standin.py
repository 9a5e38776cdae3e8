"""Stand-in modules for SGLang's CPU test environment only (see docs/rollout.md, SGLang on CPU).

SGLang 0.5.23 imports ``sgl_kernel`` and ``torchvision`` at module level along paths the CPU engine
never calls for a dense text model. PyPI has neither built for CPU torch 2.13 (``sglang-kernel``
ships GPU code only; torchvision's wheel is a CUDA build), so these modules give every imported
name and fail loudly only when one is used. This folder is put on ``sys.path`` by a ``.pth`` file
that ``.ci/sglang-env.sh`` writes into the SGLang environment; nothing else imports it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Callable
from typing import Any, NoReturn


class _StandInMeta(type):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _stand_in(f"{cls.__qualname__}.{name}")


class _StandIn(metaclass=_StandInMeta):
    def __init__(self, *args: object, **kwargs: object) -> None:
        _fail(type(self).__qualname__)


def _fail(name: str) -> NoReturn:
    raise RuntimeError(f"{name} is a stand-in (tests/sglang_stubs): the CPU engine should not call it")


def _stand_in(name: str) -> type:
    return _StandInMeta(name, (_StandIn,), {"__qualname__": name, "__module__": "sglang_stubs"})


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves every submodule of a stand-in package (``sgl_kernel.flash_attn``, ...)."""

    tops: set[str] = set()

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if "." in fullname and fullname.split(".")[0] in self.tops:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        mod = types.ModuleType(spec.name)
        mod.__getattr__ = _module_getattr(spec.name)  # type: ignore[method-assign]
        return mod

    def exec_module(self, module: types.ModuleType) -> None:
        module.__path__ = []


def _module_getattr(name: str) -> Callable[[str], Any]:
    def attribute(attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _stand_in(f"{name}.{attr}")

    return attribute


def package(name: str) -> Callable[[str], Any]:
    """The module ``__getattr__`` of the stand-in package name; its submodules are stand-ins too."""
    if not _Finder.tops:
        sys.meta_path.append(_Finder())
    _Finder.tops.add(name)
    return _module_getattr(name)
