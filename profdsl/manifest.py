"""The manifest: one JSON line per artifact or event in ``save_path/profdsl-manifest.jsonl``.

Appends are one ``write`` on a file opened with ``O_APPEND`` while holding an exclusive record
lock, so concurrent processes (ranks on a node, fused roles) never interleave or tear each other's
lines. Readers skip a torn last line (a writer killed mid-write) and any other unreadable line.

Examples:
    >>> import tempfile
    >>> read_manifest(tempfile.mkdtemp())   # a folder nothing was written to
    []
"""

from profdsl.collect._manifest import read_manifest

__all__ = ["read_manifest"]
