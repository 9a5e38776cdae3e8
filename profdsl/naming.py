"""Trace file names: build and read back the flat, collision-free names of profdsl's trace files.

Every trace profdsl writes lands in one folder under a name made by :meth:`TraceName.format` and
read back by :meth:`TraceName.parse`. The grammar, caps and examples are in ``docs/trace-names.md``.
"""

from profdsl.core.naming import (
    ARTIFACT_SUFFIXES,
    EXT_MAX_LEN,
    HOST_MAX_LEN,
    JSON_TRACE_SUFFIXES,
    MAX_INDEX,
    MAX_NAME_BYTES,
    MAX_PID,
    MAX_TIME_MS,
    NSYS_EXT,
    PLACEHOLDER_LABEL,
    ROLE_MAX_LEN,
    STAGE_MAX_LEN,
    TRACE_EXT,
    TraceName,
    is_json_trace,
    sanitize_label,
)

__all__ = [
    "ARTIFACT_SUFFIXES",
    "EXT_MAX_LEN",
    "HOST_MAX_LEN",
    "JSON_TRACE_SUFFIXES",
    "MAX_INDEX",
    "MAX_NAME_BYTES",
    "MAX_PID",
    "MAX_TIME_MS",
    "NSYS_EXT",
    "PLACEHOLDER_LABEL",
    "ROLE_MAX_LEN",
    "STAGE_MAX_LEN",
    "TRACE_EXT",
    "TraceName",
    "is_json_trace",
    "sanitize_label",
]
