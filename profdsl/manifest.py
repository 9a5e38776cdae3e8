"""The manifest: one JSON line per artifact or event in ``save_path/profdsl-manifest.jsonl``.

Appends are one ``write`` on a file opened with ``O_APPEND`` while holding an exclusive record
lock, so concurrent processes (ranks on a node, fused roles) never interleave or tear each other's
lines. Readers skip a torn last line (a writer killed mid-write) and any other unreadable line.

Examples:
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> read_manifest(folder)   # a folder nothing was written to: the raw lines
    []
    >>> read_records(folder)    # the same, as schema records (bad lines left out)
    []
"""

from profdsl.collect._manifest import read_manifest, read_records

__all__ = ["read_manifest", "read_records"]
