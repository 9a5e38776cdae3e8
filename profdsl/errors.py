"""Exception types raised by profdsl.

This module is a leaf: it imports nothing from profdsl, so every other module may use it.
"""

from __future__ import annotations

__all__ = ["ConfigError", "ProfdslError"]


class ProfdslError(Exception):
    """Base class of every error profdsl raises on purpose."""


class ConfigError(ProfdslError, ValueError):
    """An invalid configuration value.

    Raised at construction time; the message names the field and the offending value, for example
    ``Schedule.active must be an integer >= 1, got 0``.
    """
