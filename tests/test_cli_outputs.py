"""Commands that write (``merge``, ``plot``, ``export --hta``) never write over, into or as their
input folder, however the output path gets there: exit 2, one line, nothing written or changed."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import profdsl._cli
from profdsl.collect._manifest import MANIFEST_NAME

from .profiling import profile_two_ranks

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("pristine") / "profiles"
    profile_two_ranks(folder)
    return folder


@pytest.fixture
def folder(pristine: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(pristine, tmp_path / "profiles"))


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (links not followed) and its bytes."""
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()
    }


def a_trace(folder: Path) -> str:
    return next(p.name for p in sorted(folder.iterdir()) if p.name.endswith(".pt.trace.json.gz"))


def command(kind: str, folder: str, output: str) -> list[str]:
    if kind == "export":
        return ["export", "--hta", folder, "--step", "1", "--stage", "update_actor", "-o", output, "--force"]
    return [kind, folder, "-o", output]


def refused(argv: list[str], capsys: pytest.CaptureFixture[str], root: Path) -> str:
    """Run ``argv``; assert exit 2, one line on stderr, nothing on stdout, nothing under
    ``root`` changed; return the line."""
    before = snapshot(root)
    code = profdsl._cli.main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (argv, out, err)
    assert out == "" and len(err.splitlines()) == 1, (out, err)
    assert snapshot(root) == before
    return err


#: How an output path can reach the folder ``profiles`` (or a file in it), from the test's
#: working directory (the folder's parent): each returns the output path to pass.
WAYS = {
    "one of its traces": lambda tmp, f: f"profiles/{a_trace(f)}",
    "its manifest": lambda tmp, f: f"profiles/{MANIFEST_NAME}",
    "a new file inside it": lambda tmp, f: "profiles/merged.json.gz",
    "the folder itself": lambda tmp, f: "profiles",
    "a relative detour": lambda tmp, f: f"profiles/../profiles/./{a_trace(f)}",
    "an absolute path": lambda tmp, f: str(f / a_trace(f)),
    "a symlink to the folder": lambda tmp, f: (os.symlink(f, tmp / "link"), f"link/{a_trace(f)}")[1],
    "a symlink to a trace": lambda tmp, f: (os.symlink(f / a_trace(f), tmp / "out.json.gz"), "out.json.gz")[1],
    "a hard link to a trace": lambda tmp, f: (os.link(f / a_trace(f), tmp / "out.json.gz"), "out.json.gz")[1],
}


@pytest.mark.parametrize("way", sorted(WAYS))
@pytest.mark.parametrize("kind", ["merge", "plot"])
def test_an_output_that_reaches_the_input_is_refused(
    kind: str,
    way: str,
    folder: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    output = WAYS[way](tmp_path, folder)
    err = refused(command(kind, "profiles", output), capsys, tmp_path)
    assert f"profdsl {kind}: " in err and "input" in err and "write the output elsewhere" in err


@pytest.mark.parametrize(
    "way",
    [
        "the folder itself",
        "a new file inside it",
        "a symlink to the folder",
        "the folder's parent",
        "a relative detour",
    ],
)
def test_an_export_folder_that_reaches_the_input_is_refused(
    way: str, folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    output = {
        "the folder itself": "profiles",
        "a new file inside it": "profiles/hta",
        "a symlink to the folder": (os.symlink(folder, tmp_path / "link"), "link")[1],
        "the folder's parent": ".",
        "a relative detour": "profiles/../profiles",
    }[way]
    err = refused(command("export", "profiles", output), capsys, tmp_path)
    assert err.startswith("profdsl export: ") and "input folder" in err


@pytest.mark.parametrize("kind", ["merge", "plot", "export"])
def test_an_output_elsewhere_is_written(
    kind: str, folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The refusal has no false alarm: a sibling path whose name starts like the folder's is fine."""
    before = snapshot(folder)
    output = tmp_path / (
        "profiles-out" if kind == "export" else "profiles-merged.png" if kind == "plot" else "profiles-merged.json"
    )
    assert profdsl._cli.main(command(kind, str(folder), str(output))) == 0, capsys.readouterr()
    assert output.exists() and snapshot(folder) == before
