"""A hostile round against the lock-free ended entries, relocation's staging rename, the bounded
reads and the command lines' escaping: each test here failed on the code before its fix."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .scripts import run_script

#: A signal handler entering a stage while the main thread holds its step's lock (inside a fold
#: of the ended entries: a signal arrives there, between two bytecodes, as anywhere). The
#: handler's entry nests in the entry ending on the main thread: under a path beyond the cap
#: (``max_stages=1``: ``a/b``), it is counted in the very node being folded (the overflow).
_HANDLER_IN_A_FOLD = """
import signal, sys
from profdsl import profile_stage
from profdsl.metrics import _tree as tree
from tests.metrics_support import metered

tree.FOLD_AT = 1  # every ended entry folds: the handler's too
NAME, CAP = sys.argv[1], int(sys.argv[2])

def handler(signum, frame):
    with profile_stage(NAME):
        pass

signal.signal(signal.SIGUSR1, handler)
fired = []

def arriving(items, start):  # the signal arrives in the middle of the main thread's fold
    if not fired:
        fired.append(1)
        signal.raise_signal(signal.SIGUSR1)
    return __builtins__.sum(items, start)

tree.sum = arriving  # (the fold's sum: its step's lock held, its items counted, not yet taken out)
profiler = metered(max_stages=CAP)
with profiler.step(1):
    with profile_stage("a"):
        with profile_stage("b"):
            pass
timings = profiler.meter.timings
print({name: stage.count for name, stage in timings.stages.items()}, timings.overflow)
"""


@pytest.mark.parametrize(
    ("name", "cap", "counts", "overflow"),
    [
        ("h", 8, {"a": 1, "a/b": 1, "a/b/h": 1}, 0),
        ("b", 8, {"a": 1, "a/b": 1, "a/b/b": 1}, 0),
        ("h", 1, {"a": 1}, 2),
    ],
    ids=["new-node", "nested-same-name", "overflow-refolded"],
)
def test_a_signal_handler_entering_a_stage_while_its_step_folds_neither_hangs_nor_double_counts(
    name: str, cap: int, counts: dict[str, int], overflow: int
) -> None:
    """The handler's entry ends inside the main thread's fold: it makes its node (which takes the
    step's lock) and folds, the very node being folded when both are the overflow. Before the
    fix the step's lock was not re-entrant and the process hung there; each entry is counted
    once (a re-entered fold of the same node would count its items twice)."""
    code, out, err = run_script(_HANDLER_IN_A_FOLD, name, str(cap))
    assert code == 0, err
    assert out.strip() == f"{counts!r} {overflow}"


#: A process forked inside a timed stage (a DataLoader worker started in the loop), while another
#: thread holds the step's lock (``held``), times a step of its own in the child.
_FORKED_IN_A_STAGE = """
import json, os, sys, threading
from profdsl import profile_stage
from tests.metrics_support import metered

held = sys.argv[1] == "held"
parent = metered("actor")
with parent.step(1):
    root = parent.meter.root
    with profile_stage("outer"):
        holding, release = threading.Event(), threading.Event()

        def holder():
            with root.lock:
                holding.set()
                release.wait(60)

        thread = threading.Thread(target=holder)
        if held:
            thread.start()
            holding.wait(60)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                child = metered("worker")
                with child.step(1):
                    with profile_stage("inner"):
                        pass
                counts = {name: stage.count for name, stage in child.meter.timings.stages.items()}
                os.write(write, json.dumps(counts).encode())
            finally:
                os._exit(0)
        os.close(write)
        with os.fdopen(read) as pipe:
            got = pipe.read()
        os.waitpid(pid, 0)
        release.set()
        if held:
            thread.join(60)
print(got, json.dumps({name: stage.count for name, stage in parent.meter.timings.stages.items()}))
"""


@pytest.mark.parametrize("held", ["held", "free"])
def test_a_child_forked_inside_a_stage_times_its_own_steps_apart_from_the_parents_tree(held: str) -> None:
    """The child inherits the forking thread's open entries: before the fix its own entries
    nested in the parent's open stage, in the copy of the parent's tree (the child's step had
    no stage), and hung on the copy of the parent's step lock when another thread held it at the
    fork. The child's step has its stage, the parent's its own."""
    code, out, err = run_script(_FORKED_IN_A_STAGE, held)
    assert code == 0, err
    assert out.strip() == '{"inner": 1} {"outer": 1}'


#: A right-to-left override: shown raw, it reverses what follows it on the terminal (a name that
#: reads as another).
RLO = "\u202e"


@pytest.mark.parametrize("command", ["ls", "check", "summary"])
def test_a_name_of_undecodable_bytes_or_a_bidi_override_is_printed_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """A trace whose file name is no UTF-8 (Python reads it with surrogates, which a UTF-8
    terminal's stdout refuses: before the fix, a UnicodeEncodeError traceback) in a folder whose
    name holds a right-to-left override (shown raw before). Both are escaped, as a control
    character is."""
    import profdsl._cli

    folder = tmp_path / f"run{RLO}nosj"
    folder.mkdir()
    name = os.fsencode(folder) + b"/actor\xfe.pt.trace.json"
    with open(name, "wb") as file:
        file.write(b'{"traceEvents": []}')
    profdsl._cli.main([command, str(folder)])
    out, err = capsys.readouterr()
    assert RLO not in out + err and "\udcfe" not in out + err
    assert "\\udcfe" in out + err and "run\\u202enosj" in err + out


def test_a_copy_across_filesystems_whose_source_cannot_be_removed_leaves_no_trace_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Across filesystems a source is copied in, then removed. Where it cannot be removed (its
    folder not writable), the move failed: before the fix its copy stayed in save_path under a
    trace name, recorded nowhere (the record says ``failed``, naming no file), and every later
    pass copied it in again under the next free name. Now the copy goes, the source stays, the
    failure is recorded, and the next pass finds save_path as it was."""
    import errno

    from profdsl.collect import _relocate as relocate
    from profdsl.core._naming import TraceName
    from profdsl.manifest import read_manifest

    source = tmp_path / "engine" / "rollout.json"
    source.parent.mkdir()
    source.write_text('{"traceEvents": []}')
    save = tmp_path / "save"
    name = TraceName(role="rollout", host="h", pid=1, time_ms=1_795_000_000_000, ext=".json")
    move = relocate.Move(str(source), name, "rollout", {"role": "rollout"})
    replace, remove = os.replace, os.remove

    def across(src: str, dst: str) -> None:  # the source lies on another filesystem
        if src == str(source):
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        replace(src, dst)

    def kept(path: str) -> None:  # its folder is not writable
        if path == str(source):
            raise PermissionError(errno.EACCES, "Permission denied", path)
        remove(path)

    monkeypatch.setattr(os, "replace", across)
    monkeypatch.setattr(os, "remove", kept)
    for _ in range(2):
        relocate.apply([move], str(save), wait_s=5, record_incomplete=True)
    assert source.read_text() == '{"traceEvents": []}'
    assert sorted(p.name for p in save.iterdir()) == ["profdsl-manifest.jsonl"]
    records = read_manifest(save)
    assert [r["status"] for r in records] == ["failed", "failed"]
    assert all("Permission denied" in r["error"] and r.get("file") is None for r in records)
