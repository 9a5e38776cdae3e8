"""What profdsl writes, as typed classes: manifest records and trace metadata
(:mod:`profdsl.records.schema`, the one place their keys are spelled)."""

from profdsl.records.schema import *  # noqa: F403  (the names; their one home is profdsl.records.schema)
from profdsl.records.schema import __all__ as __all__
