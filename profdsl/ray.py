"""Ray integration: profiled worker actors, and the trainer's side that drives them.

``import profdsl.ray`` does not import Ray; the functions that need it import it when called.
See :mod:`profdsl.integrations._ray` for the implementation and ``docs/ray.md`` for a guide.
"""

from profdsl.integrations._ray import *  # noqa: F403  (its __all__: the public names)
from profdsl.integrations._ray import __all__ as __all__
