"""What profdsl writes, as typed classes, one module per kind of thing: manifest records
(:mod:`~profdsl.records.manifest`), trace metadata (:mod:`~profdsl.records.meta`), capture requests
(:mod:`~profdsl.records.requests`) and metrics log lines (:mod:`~profdsl.records.metrics_log`), over
one field codec (:mod:`~profdsl.records.fields`). These modules are the one place their keys are
spelled."""

from profdsl.records.fields import SCHEMA_VERSION, VERSION_KEY, RecordError, to_json
from profdsl.records.manifest import *  # noqa: F403
from profdsl.records.manifest import __all__ as _manifest
from profdsl.records.meta import *  # noqa: F403
from profdsl.records.meta import __all__ as _meta
from profdsl.records.metrics_log import *  # noqa: F403
from profdsl.records.metrics_log import __all__ as _metrics_log
from profdsl.records.requests import *  # noqa: F403
from profdsl.records.requests import __all__ as _requests

__all__ = ["SCHEMA_VERSION", "VERSION_KEY", "RecordError", "to_json", *_manifest, *_meta, *_metrics_log, *_requests]
