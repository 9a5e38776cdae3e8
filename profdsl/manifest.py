"""The manifest: one JSON line per artifact or event in ``save_path/profdsl-manifest.jsonl``.

Appends are one ``write`` on a file opened with ``O_APPEND`` while holding an exclusive ``flock``,
so concurrent processes (ranks on a node, fused roles) never interleave or tear each other's
lines. Readers skip a torn last line (a writer killed mid-write) and any other unreadable line.

Examples:
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> append_record(folder, make_record("trace", "a.pt.trace.json.gz", role="actor", step=3))
    True
    >>> [(r["kind"], r["role"], r["step"], r["rank"]) for r in read_manifest(folder)]
    [('trace', 'actor', 3, None)]
"""

from profdsl.collect import manifest as _manifest
from profdsl.collect.manifest import *  # noqa: F403  (the public names; their one home is profdsl.collect.manifest)

__all__ = _manifest.__all__
