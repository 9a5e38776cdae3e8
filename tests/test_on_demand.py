"""On-demand and automatic captures with real profiling (torch on CPU): a request file, a
``Profiler.request`` call and ``POST /profile`` each trace exactly the steps, ranks and roles
asked; the hook runs once per completed request; an injected slow step is captured once within
``max_captures``; the metrics log holds every step; and no malformed request or failing
exporter stalls or breaks the loop."""

from __future__ import annotations

import http.client
import json
import logging
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from profdsl import AutoCapture, FinishHook, Metrics, OnDemand, Profiler, profile_stage
from profdsl._cli import main
from profdsl._runtime.process import PROCESS, Process
from profdsl.collect._requests import REQUESTS_DIR, write_request
from profdsl.collect.metrics_log import log_files, read_log
from profdsl.metrics._prometheus import PrometheusExporter
from profdsl.records.requests import CaptureRequest

from .metrics_support import FakeClock, fake_clock
from .profiling import config, in_forked_child, records, work

pytest.importorskip("torch")


def traced(folder: Path) -> set[tuple[str, int, int]]:
    """(role, step, rank) of every trace written."""
    return {(r["role"], r["step"], r["rank"]) for r in records(folder, "trace") if r["status"] == "ok"}


def captures(folder: Path) -> dict[tuple[str, int, int], dict[str, Any] | None]:
    """Each trace's capture note (None: the plan's)."""
    return {(r["role"], r["step"], r["rank"]): r.get("capture") for r in records(folder, "trace")}


def run(
    profiler: Profiler, steps: range, before: Callable[[int], object] | None = None, stage: str = "update_actor"
) -> None:
    for step in steps:
        if before is not None:
            before(step)
        with profiler.step(step):
            with profile_stage(stage, profiler=profiler):
                work()


def request_file(folder: Path, request_id: str, **fields: Any) -> None:
    write_request(str(folder), CaptureRequest(id=request_id, created=time.time(), **fields))


class TestRequestFiles:
    """``profdsl trigger``'s files, found at step boundaries."""

    def test_two_ranks_trace_exactly_the_steps_and_ranks_asked(self, tmp_path: Path) -> None:
        """Ranks 0 and 1 (each with its own process state, as two processes) run steps 0-7; the
        plan traces rank 0 at step 1; a request asks for rank 1, steps 3-4: those and nothing
        more are traced, each with its capture note, and `profdsl check` finds nothing missing."""
        cfg = config(tmp_path, steps=[1])
        ranks = [Profiler(cfg, role="actor", rank=r, world_size=2, process=Process()) for r in (0, 1)]
        try:
            for step in range(8):
                if step == 2:
                    request_file(tmp_path, "look-at-rank-1", steps=2, ranks=(1,), at_step=3, reason="loss spike")
                for profiler in ranks:
                    with profiler.step(step):
                        work()
        finally:
            for profiler in ranks:
                profiler.close()
        assert traced(tmp_path) == {("actor", 1, 0), ("actor", 3, 1), ("actor", 4, 1)}
        notes = captures(tmp_path)
        assert notes[("actor", 1, 0)] is None
        assert notes[("actor", 3, 1)] == {
            "source": "file",
            "request": "look-at-rank-1",
            "steps": [3, 4],
            "reason": "loss spike",
        }
        assert main(["check", str(tmp_path)]) == 0

    def test_roles_asked_only(self, tmp_path: Path) -> None:
        """Fused roles (actor, ref), discrete: a request for `ref` traces ref's stage only."""
        cfg = config(tmp_path, steps=[], discrete=True)
        actor = Profiler(cfg, role="actor", rank=0, world_size=1)
        ref = Profiler(cfg, role="ref", rank=0, world_size=1)
        for step in range(5):
            if step == 1:
                request_file(tmp_path, "ref-only", steps=1, roles=("ref",))
            actor.start(step)
            ref.start(step)
            with profile_stage("update_actor", role="actor"):
                work()
            with profile_stage("compute_ref_log_prob", role="ref"):
                work()
            actor.stop()
            ref.stop()
        actor.close()
        ref.close()
        assert traced(tmp_path) == {("ref", 1, 0)}
        assert {r["stage"] for r in records(tmp_path, "trace")} == {"compute_ref_log_prob"}

    def test_malformed_files_are_logged_and_ignored(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        """Not JSON, a bad field, too many steps, a FIFO and a folder named like a request, an
        oversized file, and a request made before the job: each logged, none traced, every step
        run."""
        profiler = Profiler(
            config(tmp_path, steps=[], on_demand=OnDemand(max_steps=3)), role="actor", rank=0, world_size=1
        )
        folder = tmp_path / REQUESTS_DIR
        folder.mkdir()
        old = time.time() - 10  # the mtime of files written "by hand" long enough ago to be whole

        def hostile(step: int) -> None:
            if step != 1:
                return
            for name, text in (
                ("a.json", "{not json"),
                ("b.json", '{"id": "b", "steps": "2"}'),
                ("c.json", json.dumps({"id": "c", "steps": 5, "created": time.time()})),
                ("d.json", json.dumps({"id": "d", "steps": 1, "created": 1.0})),
                ("e.json", " " * 70_000),
            ):
                (folder / name).write_text(text)
                os.utime(folder / name, (old, old))
            os.mkfifo(folder / "f.json")
            (folder / "g.json").mkdir()

        with caplog.at_level(logging.INFO, logger="profdsl"):
            run(profiler, range(5), before=hostile)
        profiler.close()
        assert traced(tmp_path) == set()
        said = caplog.text
        for why in (
            "a.json is not a capture request (not JSON",
            "b.json is not a capture request (steps must be",
            "5 steps asked, at most 3 (OnDemand.max_steps)",
            "d.json was made before this process",
            "e.json is not a capture request (cannot read",
            "f.json is not a capture request (cannot read",
            "g.json is not a capture request (cannot read",
        ):
            assert why in said, why
        assert profiler.meter is not None  # and the loop ran every step (no exception reached it)

    def test_a_link_named_like_a_request_is_not_followed(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Whoever may put a link into the request folder must not make the job read a file
        elsewhere (its values would reach the log, quoted in the refusal) nor take a request it
        holds: a link is refused unread, like a FIFO."""
        profiler = Profiler(config(tmp_path / "run", steps=[]), role="actor", rank=0, world_size=1)
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        (elsewhere / "secret.json").write_text(json.dumps({"id": "s", "steps": "hunter2-secret"}))
        (elsewhere / "valid.json").write_text(json.dumps({"id": "v", "steps": 1}))
        ahead = time.time() + 60  # dated ahead: read at once, never taken for half-written
        for target in elsewhere.iterdir():
            os.utime(target, (ahead, ahead))
        folder = tmp_path / "run" / REQUESTS_DIR
        folder.mkdir(parents=True)
        (folder / "a.json").symlink_to(elsewhere / "secret.json")
        (folder / "b.json").symlink_to(elsewhere / "valid.json")
        with caplog.at_level(logging.INFO, logger="profdsl"):
            run(profiler, range(3))
        profiler.close()
        assert traced(tmp_path / "run") == set()
        assert "hunter2-secret" not in caplog.text
        for name in ("a.json", "b.json"):
            assert f"{name} is not a capture request (cannot read: a link" in caplog.text

    def test_one_stat_per_step_when_nothing_changes(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Once the folder's timestamp is settled, a step costs one stat of it: no listing."""
        from profdsl.collect import _requests as requests

        (tmp_path / REQUESTS_DIR).mkdir()
        past = time.time() - 10
        os.utime(tmp_path / REQUESTS_DIR, (past, past))
        profiler = Profiler(config(tmp_path, steps=[]), role="actor", rank=0, world_size=1)
        calls = {"stat": 0, "listdir": 0}
        real_stat, real_listdir = os.stat, os.listdir

        def counting_stat(path: Any, *args: Any, **kwargs: Any) -> Any:
            calls["stat"] += str(path).endswith(REQUESTS_DIR)
            return real_stat(path, *args, **kwargs)

        def counting_listdir(path: Any = ".") -> Any:
            calls["listdir"] += str(path).endswith(REQUESTS_DIR)
            return real_listdir(path)

        monkeypatch.setattr(requests.os, "stat", counting_stat)
        monkeypatch.setattr(requests.os, "listdir", counting_listdir)
        run(profiler, range(6))
        monkeypatch.undo()
        profiler.close()
        assert calls == {"stat": 6, "listdir": 1}  # the first look lists it once


class TestRequestCalls:
    """``Profiler.request``, bounds, idempotence and the hook."""

    def test_request_traces_exactly_and_hooks_run_once_per_request(self, tmp_path: Path) -> None:
        """The plan traces step 1; requests made before steps 2 and 5 ask for two steps and for
        one: steps 2-3 and 5 are traced, and the hook runs three times (the plan's and one per
        request), each after its own traces, with its steps and request."""
        log = tmp_path.parent / f"{tmp_path.name}-hooks.txt"
        cfg = config(
            tmp_path,
            steps=[1],
            finish_hook=FinishHook(
                cmd=f'echo "$PROFDSL_STEPS|$PROFDSL_CAPTURE|$PROFDSL_REQUEST|$(ls "$PROFDSL_SAVE_PATH" | '
                f'grep -c trace.json)" >> {log}'
            ),
        )
        profiler = Profiler(cfg, role="actor", rank=0, world_size=1)
        ids: dict[int, str | None] = {}

        def ask(step: int) -> None:
            if step == 2:
                ids[2] = profiler.request(2, reason="look")
            if step == 5:
                ids[5] = profiler.request(1)

        run(profiler, range(8), before=ask)
        profiler.close()
        assert traced(tmp_path) == {("actor", s, 0) for s in (1, 2, 3, 5)}
        # Each run sees at least the traces up to its last step (a request's hook runs on a thread
        # of its own, so a later step's trace may already be there too).
        runs = {tuple(line.split("|")[:3]): int(line.split("|")[3]) for line in log.read_text().splitlines()}
        expected = {("1", "", ""): 1, ("2,3", "api", ids[2]): 3, ("5", "api", ids[5]): 4}
        assert runs.keys() == expected.keys()
        assert all(expected[key] <= seen <= 4 for key, seen in runs.items()), runs
        hooks = records(tmp_path, "hook")
        assert [h["capture"]["request"] if h.get("capture") else None for h in hooks].count(None) == 1
        assert all(h["status"] == "ok" for h in hooks) and len(hooks) == 3

    def test_bounds_and_idempotence(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        """At most max_steps steps and max_requests requests; a request id is taken once, however
        it comes (a file and a call with the same id)."""
        cfg = config(tmp_path, steps=[], on_demand=OnDemand(max_steps=2, max_requests=2))
        profiler = Profiler(cfg, role="actor", rank=0, world_size=1)

        def ask(step: int) -> None:
            if step == 1:
                assert profiler.request(3) is not None  # too many steps: refused, logged
                request_file(tmp_path, "same", steps=1)
            if step == 2:  # the file was taken at step 1: the same id again changes nothing
                assert PROCESS.inbox.deliver(CaptureRequest(id="same", steps=2, source="api")).status == "duplicate"
            if step == 4:
                profiler.request(1)
            if step == 6:
                profiler.request(1)  # a third request: refused

        with caplog.at_level(logging.INFO, logger="profdsl"):
            run(profiler, range(9), before=ask)
        profiler.close()
        assert traced(tmp_path) == {("actor", 1, 0), ("actor", 4, 0)}
        assert "3 steps asked, at most 2 (OnDemand.max_steps)" in caplog.text
        assert "2 requests taken already, at most 2 (OnDemand.max_requests)" in caplog.text

    def test_off_when_disabled(self, tmp_path: Path) -> None:
        """OnDemand(enabled=False) takes no request (and watches no folder); enable=False neither."""
        for cfg in (config(tmp_path, steps=[], on_demand=OnDemand(enabled=False)), config(tmp_path, enable=False)):
            profiler = Profiler(cfg, role="actor", rank=0, world_size=1)
            run(profiler, range(3), before=lambda s, p=profiler: p.request(1) if s == 0 else None)
            profiler.close()
        assert traced(tmp_path) == set()

    def test_a_rank_the_plan_does_not_trace(self, tmp_path: Path) -> None:
        """Rank 3 of 4, not in the plan's ranks: a request naming it by selector traces it."""
        profiler = Profiler(config(tmp_path, steps=[0], ranks=[0]), role="actor", rank=3, world_size=4)
        run(profiler, range(4), before=lambda s: profiler.request(1, ranks="rank in {1, 3}") if s == 1 else None)
        profiler.close()
        assert traced(tmp_path) == {("actor", 1, 3)}


def test_a_role_joining_a_requested_step_session_still_runs_its_hook(tmp_path: Path) -> None:
    """Fused roles, each with its own save_path: the actor's step 1 is captured by a request,
    the ref's by its plan, and the ref joins the session the request opened. The session's hold
    on the ref's save_path is released in the round it was taken in, so the ref's hook runs."""
    log = tmp_path / "hooks.txt"
    actor = Profiler(config(tmp_path / "actor", steps=[]), role="actor", rank=0, world_size=1)
    ref_config = config(tmp_path / "ref", finish_hook=FinishHook(cmd=f"echo ran >> {log}"))
    ref = Profiler(ref_config, role="ref", rank=0, world_size=1)
    for step in range(3):
        if step == 1:
            assert actor.request(1, roles=["actor"]) is not None
        with actor.step(step), ref.step(step), profile_stage("update_actor", profiler=actor):
            work()
    actor.close()
    ref.close()
    assert traced(tmp_path / "actor") == {("actor", 1, 0)}
    assert [h["status"] for h in records(tmp_path / "ref", "hook")] == ["ok"]
    assert log.read_text() == "ran\n"


@pytest.mark.parametrize("requested", [True, False], ids=["request", "plan"])
def test_a_role_joining_a_later_part_of_a_step_session_still_runs_its_hook(tmp_path: Path, requested: bool) -> None:
    """Fused roles, each with its own save_path: the actor's step 1 (a request's, or the plan's)
    opens the step session, a discrete stage of a third role cuts it, and the ref's step begins
    only then: the ref joins the session's second part, not its first. Its save_path is held
    and released by that part, so the ref's hook runs once, after the step is written."""
    log = tmp_path / "hooks.txt"
    actor = Profiler(config(tmp_path / "actor", steps=[] if requested else [1]), role="actor", rank=0, world_size=1)
    ref_config = config(tmp_path / "ref", finish_hook=FinishHook(cmd=f"echo ran >> {log}"))
    ref = Profiler(ref_config, role="ref", rank=0, world_size=1)
    critic = Profiler(config(tmp_path / "critic", discrete=True), role="critic", rank=0, world_size=1)
    for step in range(3):
        if step == 1 and requested:
            assert actor.request(1, roles=["actor"]) is not None
        with critic.step(step), actor.step(step):
            work()
            profile_stage("update_critic", role="critic")(work)()
            with ref.step(step):  # joins the part the stage's end resumed
                work()
    for profiler in (actor, ref, critic):
        profiler.close()
    assert [(r["role"], r["part"], r["roles"]) for r in records(tmp_path / "actor", "trace")] == [
        ("actor", 0, ["actor"]),
        ("actor", 1, ["actor", "ref"]),
    ]
    assert [(r["role"], r["status"]) for r in records(tmp_path / "ref", "trace")] == [("ref", "skipped")]
    assert [(h["status"], h["steps"]) for h in records(tmp_path / "ref", "hook")] == [("ok", [1])]
    assert log.read_text() == "ran\n"


def _fused_roles_cut_by_a_stage(tmp_path: Path, *hooked: str) -> tuple[Profiler, Profiler, Profiler, Path]:
    """The actor and the ref, continuous, each with its own save_path, fused into one step
    session; the critic, discrete. The ``hooked`` roles' hooks each add a line to the log: the
    role and the number of traces in the actor's save_path."""
    log = tmp_path / "hooks.txt"

    def role_config(role: str, **kwargs: Any) -> Any:
        count = f"echo {role} $(find {tmp_path / 'actor'} -name '*.pt.trace.json*' | wc -l) >> {log}"
        if role in hooked:
            kwargs["finish_hook"] = FinishHook(cmd=count)
        return config(tmp_path / role, **kwargs)

    actor = Profiler(role_config("actor"), role="actor", rank=0, world_size=1)
    ref = Profiler(role_config("ref"), role="ref", rank=0, world_size=1)
    critic = Profiler(role_config("critic", discrete=True), role="critic", rank=0, world_size=1)
    return actor, ref, critic, log


def settle(profiler: Profiler) -> None:
    """Wait (bounded) until the writer has done what it was handed and every hook submitted ran."""
    assert profiler.process.writer.wait(timeout=60)
    assert all(job.finished.wait(60) for job in profiler.process.rounds.unfinished())


def trace_parts(folder: Path) -> list[tuple[str, int, list[str]]]:
    return [(r["role"], r["part"], r["roles"]) for r in records(folder, "trace")]


@pytest.mark.parametrize("parts", [2, 3])
@pytest.mark.parametrize("end", ["stop", "close"])
def test_a_step_session_cut_after_its_first_role_stopped_still_runs_that_roles_hook_last(
    tmp_path: Path, parts: int, end: str
) -> None:
    """The actor's step ends while the ref's goes on; discrete stages of the critic then cut the
    step session: its part 0 is written, and the parts after it, still named after the actor,
    are written into the actor's save_path as the stages end and the ref stops (or closes). The
    actor's hook runs once, after them all (before the fix: after part 0, seeing one trace)."""
    actor, ref, critic, log = _fused_roles_cut_by_a_stage(tmp_path, "actor")
    critic.start(1)
    actor.start(1)
    ref.start(1)
    profile_stage("update_actor", role="actor")(work)()
    actor.stop()
    for _ in range(parts - 1):
        profile_stage("update_critic", role="critic")(work)()  # cuts the step session
        settle(actor)  # what is due by now has run: the next part is not written yet
        profile_stage("compute_ref", role="ref")(work)()
    if end == "stop":
        ref.stop()
    for profiler in (ref, actor, critic):
        profiler.close()
    assert trace_parts(tmp_path / "actor") == [("actor", part, ["actor", "ref"]) for part in range(parts)]
    assert [(h["status"], h["steps"]) for h in records(tmp_path / "actor", "hook")] == [("ok", [1])]
    assert log.read_text() == f"actor {parts}\n"


def test_a_step_session_cut_after_the_joining_role_stopped_runs_each_hook_once(tmp_path: Path) -> None:
    """The other order: the ref stops first, the critic's stage cuts the step, the actor goes on
    in part 1 (which no longer writes for the ref) and stops. Each role's hook runs once; the
    actor's after both parts."""
    actor, ref, critic, log = _fused_roles_cut_by_a_stage(tmp_path, "actor", "ref")
    critic.start(1)
    actor.start(1)
    ref.start(1)
    profile_stage("compute_ref", role="ref")(work)()
    ref.stop()
    profile_stage("update_critic", role="critic")(work)()
    profile_stage("update_actor", role="actor")(work)()
    actor.stop()
    for profiler in (actor, ref, critic):
        profiler.close()
    assert trace_parts(tmp_path / "actor") == [("actor", 0, ["actor", "ref"]), ("actor", 1, ["actor"])]
    for role in ("actor", "ref"):
        assert [h["status"] for h in records(tmp_path / role, "hook")] == ["ok"]
    assert sorted(line.split()[0] for line in log.read_text().splitlines()) == ["actor", "ref"]
    assert "actor 2" in log.read_text().splitlines()


def test_a_step_session_whose_last_role_closes_between_its_parts_runs_the_hook_then(tmp_path: Path) -> None:
    """The ref closes while the critic's stage has cut the step session: no part follows, and
    the actor's hook, held by the step between parts, runs once, after part 0."""
    actor, ref, critic, log = _fused_roles_cut_by_a_stage(tmp_path, "actor")
    critic.start(1)
    actor.start(1)
    ref.start(1)
    profile_stage("update_actor", role="actor")(work)()
    actor.stop()
    with profile_stage("update_critic", role="critic"):
        work()
        ref.close()
        settle(actor)
        assert log.read_text() == "actor 1\n"
    for profiler in (actor, critic):
        profiler.close()
    assert trace_parts(tmp_path / "actor") == [("actor", 0, ["actor", "ref"])]
    assert [h["status"] for h in records(tmp_path / "actor", "hook")] == ["ok"]


def test_a_reset_between_the_parts_of_a_step_session_leaves_no_hold(tmp_path: Path) -> None:
    """``reset()`` while the critic's stage has cut the step session forgets the round the step
    held between parts; the same save_paths' next roles run their hook after all their parts."""
    from profdsl.testing import reset

    actor, ref, critic, log = _fused_roles_cut_by_a_stage(tmp_path, "actor")
    critic.start(1)
    actor.start(1)
    ref.start(1)
    actor.stop()
    with profile_stage("update_critic", role="critic"):
        reset()
    actor, ref, critic, log = _fused_roles_cut_by_a_stage(tmp_path, "actor")
    critic.start(1)
    actor.start(1)
    ref.start(1)
    actor.stop()
    profile_stage("update_critic", role="critic")(work)()
    settle(actor)
    ref.stop()
    for profiler in (actor, ref, critic):
        profiler.close()
    assert [h["status"] for h in records(tmp_path / "actor", "hook")] == ["ok"]
    assert log.read_text() == "actor 3\n"  # the part written at the reset, and the new step's two


def test_a_child_forked_between_the_parts_of_a_step_session_owes_no_hook(tmp_path: Path) -> None:
    """A fork while the critic's stage has cut the step session: the child holds nothing of the
    parent's rounds and runs no hook; the parent's hook runs once, after both parts."""
    actor, ref, critic, log = _fused_roles_cut_by_a_stage(tmp_path, "actor")
    critic.start(1)
    actor.start(1)
    ref.start(1)
    actor.stop()

    def child() -> dict[str, Any]:
        ref.stop()
        return {"hooks": len(ref.process.rounds.jobs)}

    with profile_stage("update_critic", role="critic"):
        assert in_forked_child(child) == {"hooks": 0}
    ref.stop()
    for profiler in (actor, ref, critic):
        profiler.close()
    assert [h["status"] for h in records(tmp_path / "actor", "hook")] == ["ok"]
    assert log.read_text() == "actor 2\n"


class TestHttp:
    """``POST /profile`` on the metrics endpoint."""

    @pytest.fixture
    def profiler(self, tmp_path: Path) -> Iterator[Profiler]:
        pytest.importorskip("prometheus_client")
        cfg = config(tmp_path, steps=[], metrics=Metrics(enabled=True, exporters=["prometheus"], port=0))
        profiler = Profiler(cfg, role="actor", rank=0, world_size=1)
        yield profiler
        profiler.close()

    @staticmethod
    def post(profiler: Profiler, body: bytes, method: str = "POST") -> tuple[int, dict[str, Any]]:
        [exporter] = profiler.meter.exporters  # type: ignore[attr-defined]
        assert isinstance(exporter, PrometheusExporter)
        request = urllib.request.Request(
            f"http://127.0.0.1:{exporter.server.port}/profile",
            data=body,
            method=method,
            headers={"Content-Type": "application/json"},  # what a client sends (a page cannot)
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def test_post_traces_the_steps_asked(self, profiler: Profiler, tmp_path: Path) -> None:
        answers = []
        run(
            profiler,
            range(6),
            before=lambda s: (
                answers.append(self.post(profiler, json.dumps({"id": "h1", "steps": 2, "at_step": 3}).encode()))
                if s == 1
                else None
            ),
        )
        assert answers == [(202, {"request": "h1", "status": "accepted", "roles": ["actor"], "why": []})]
        assert self.post(profiler, b'{"id": "h1", "steps": 2}')[0] == 200  # taken once
        profiler.close()
        assert traced(tmp_path) == {("actor", 3, 0), ("actor", 4, 0)}
        assert captures(tmp_path)[("actor", 3, 0)]["source"] == "http"  # type: ignore[index]

    def test_bad_requests_are_answered_and_ignored(self, profiler: Profiler, tmp_path: Path) -> None:
        status, answer = self.post(profiler, b"{nope")
        assert status == 400 and "not JSON" in answer["why"][0]
        assert self.post(profiler, b'{"steps": 0}')[0] == 400
        assert self.post(profiler, b'{"steps": 1, "ranks": [5]}')[0] == 409  # rank 5 is not here
        assert self.post(profiler, b"", method="GET")[0] == 405
        assert self.post(profiler, b"x" * 70_000)[0] == 413
        run(profiler, range(3))
        profiler.close()
        assert traced(tmp_path) == set()

    def test_each_answer_carries_its_reason_phrase(self, profiler: Profiler) -> None:
        [exporter] = profiler.meter.exporters  # type: ignore[attr-defined]

        def status_line(body: bytes, method: str = "POST") -> tuple[int, str]:
            connection = http.client.HTTPConnection("127.0.0.1", exporter.server.port, timeout=30)
            try:
                connection.request(method, "/profile", body=body, headers={"Content-Type": "application/json"})
                response = connection.getresponse()
                return response.status, response.reason
            finally:
                connection.close()

        assert status_line(b'{"id": "r1", "steps": 1}') == (202, "Accepted")
        assert status_line(b'{"id": "r1", "steps": 1}') == (200, "OK")
        assert status_line(b"{nope") == (400, "Bad Request")
        assert status_line(b'{"id": "r2", "steps": 1, "ranks": [5]}') == (409, "Conflict")
        assert status_line(b"", "GET") == (405, "Method Not Allowed")
        assert status_line(b"x" * 70_000) == (413, "Content Too Large")


class TestAuto:
    """``ProfilerConfig.auto``: slow steps catch themselves."""

    def test_an_injected_slowdown_is_captured_exactly_once(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        """update_actor takes 10 ms a step, 100 ms at steps 6 and 12: with max_captures=1, step 7
        alone is traced, its record saying why."""
        cfg = config(
            tmp_path,
            steps=[],
            metrics=Metrics(enabled=True),
            auto=AutoCapture(stages=["update_actor"], baseline_steps=4, max_captures=1, cooldown_steps=0),
        )
        with fake_clock(monkeypatch) as clock, caplog.at_level(logging.WARNING, logger="profdsl"):
            profiler = Profiler(cfg, role="actor", rank=0, world_size=1)
            self.loop(profiler, clock, slow={6, 12}, steps=16)
            profiler.close()
        assert traced(tmp_path) == {("actor", 7, 0)}
        note = captures(tmp_path)[("actor", 7, 0)]
        assert note is not None and note["source"] == "auto" and note["steps"] == [7, 7]
        assert note["reason"] == (
            "actor: update_actor took 10.0x the median of steps 2-5 at step 6 (100.0 ms against 10.0 ms)"
        )
        assert "slow step: actor: update_actor took 10.0x" in caplog.text and "tracing step 7" in caplog.text

    def test_cooldown_and_max_captures(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Slow at 4, 6 and 12 with cooldown_steps=3 and max_captures=2: steps 5 and 13 traced
        (6 falls in the cooldown)."""
        cfg = config(
            tmp_path,
            steps=[],
            metrics=Metrics(enabled=True),
            auto=AutoCapture(baseline_steps=3, max_captures=2, cooldown_steps=3),
        )
        with fake_clock(monkeypatch) as clock:
            profiler = Profiler(cfg, role="actor", rank=0, world_size=1)
            self.loop(profiler, clock, slow={4, 6, 12, 15}, steps=18)
            profiler.close()
        assert traced(tmp_path) == {("actor", 5, 0), ("actor", 13, 0)}

    def test_a_failing_exporter_stops_nothing(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The metrics exporter raises at every step: logged once; the loop, the metrics log and
        the automatic capture go on."""
        pytest.importorskip("prometheus_client")

        def broken(self: PrometheusExporter, timings: Any) -> None:
            raise RuntimeError("scrape store full")

        monkeypatch.setattr(PrometheusExporter, "export", broken)
        cfg = config(
            tmp_path,
            steps=[],
            metrics=Metrics(enabled=True, exporters=["prometheus"], port=0, log=True),
            auto=AutoCapture(baseline_steps=3, max_captures=1),
        )
        with fake_clock(monkeypatch) as clock, caplog.at_level(logging.ERROR, logger="profdsl"):
            profiler = Profiler(cfg, role="actor", rank=0, world_size=1)
            self.loop(profiler, clock, slow={5}, steps=8)
            profiler.close()
        assert caplog.text.count("scrape store full") == 1
        assert traced(tmp_path) == {("actor", 6, 0)}
        lines, problems = read_log(tmp_path)
        assert problems == [] and [line.step for line in lines] == list(range(8))

    def test_a_failing_slow_step_check_stops_nothing(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The rolling-median check raises at every step: logged once; every step runs and is
        logged, nothing is traced."""
        from profdsl.metrics._slow import SlowSteps

        def broken(self: SlowSteps, *args: Any, **kwargs: Any) -> None:
            raise ZeroDivisionError("median of nothing")

        monkeypatch.setattr(SlowSteps, "observe", broken)
        cfg = config(
            tmp_path,
            steps=[],
            metrics=Metrics(enabled=True, log=True),
            auto=AutoCapture(baseline_steps=3, max_captures=1),
        )
        with fake_clock(monkeypatch) as clock, caplog.at_level(logging.ERROR, logger="profdsl"):
            profiler = Profiler(cfg, role="actor", rank=0, world_size=1)
            self.loop(profiler, clock, slow={5}, steps=8)
            profiler.close()
        assert caplog.text.count("median of nothing") == 1
        assert traced(tmp_path) == set()
        lines, _ = read_log(tmp_path)
        assert [line.step for line in lines] == list(range(8))

    def test_a_failing_straggler_gauge_stops_nothing(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A worker's exporter fails to show the driver's straggler alerts (in-process, as the
        driver calls it): logged once; the steps run and their timings come back."""
        pytest.importorskip("prometheus_client")
        from profdsl.metrics._slow import StragglerAlert
        from profdsl.ray import ProfiledWorker

        def broken(self: PrometheusExporter, alert: Any) -> None:
            raise RuntimeError("gauge store full")

        monkeypatch.setattr(PrometheusExporter, "alert", broken)

        class Worker(ProfiledWorker):
            def __init__(self) -> None:
                self.init_profiler(
                    config(tmp_path, steps=[], metrics=Metrics(enabled=True, exporters=["prometheus"], port=0)),
                    role="actor",
                    rank=1,
                    world_size=2,
                )

        worker = Worker()
        alert = StragglerAlert("actor", "update_actor", 1, 4.0, (3, 5), 3)
        with caplog.at_level(logging.ERROR, logger="profdsl"):
            for step in range(3):
                worker.start_profile(step, alerts=[alert, attrs.evolve(alert, active=False)])
                with profile_stage("update_actor", role="actor"):
                    work()
                assert [t.step for t in worker.stop_profile()] == [step]
            worker.finish_profile()
        assert caplog.text.count("gauge store full") == 1

    @staticmethod
    def loop(profiler: Profiler, clock: FakeClock, *, slow: set[int], steps: int) -> None:
        for step in range(steps):
            with profiler.step(step):
                with profile_stage("update_actor", profiler=profiler):
                    work()
                    clock.advance(0.1 if step in slow else 0.01)


class TestMetricsLog:
    """``Metrics(log=True)``: every step of every role, in save_path."""

    def test_every_step_every_role_flushed_at_each_step(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        cfg = config(tmp_path, steps=[2], metrics=Metrics(enabled=True, log=True))
        with fake_clock(monkeypatch) as clock:
            actor = Profiler(cfg, role="actor", rank=0, world_size=1)
            ref = Profiler(cfg, role="ref", rank=0, world_size=1)
            for step in range(4):
                actor.start(step)
                ref.start(step)
                with profile_stage("update_actor", role="actor"):
                    clock.advance(0.25)
                actor.stop()
                ref.stop()
                assert PROCESS.writer.wait(timeout=60)
                lines, _ = read_log(tmp_path)  # written once the writer reaches it: no close needed
                assert len(lines) == 2 * (step + 1)
            actor.close()
            ref.close()
        [name] = log_files(tmp_path)
        assert name == f"profdsl-metrics-rank0-{_safe_host()}-{os.getpid()}.jsonl"
        lines, problems = read_log(tmp_path)
        assert problems == []
        assert [(line.role, line.step, line.traced) for line in lines] == [
            (role, step, step == 2) for step in range(4) for role in ("actor", "ref")
        ]
        assert all(line.stages["update_actor"].total_s == 0.25 for line in lines if line.role == "actor")
        assert main(["check", str(tmp_path)]) == 0  # the log is no artifact: nothing "not in the manifest"

    def test_a_save_path_not_made_yet(self, tmp_path: Path) -> None:
        """Untraced steps before the first trace: the log makes save_path (no step is lost)."""
        folder = tmp_path / "not" / "yet"
        profiler = Profiler(
            config(folder, steps=[], metrics=Metrics(enabled=True, log=True)), role="actor", rank=0, world_size=1
        )
        run(profiler, range(3))
        profiler.close()
        lines, problems = read_log(folder)
        assert problems == [] and [line.step for line in lines] == [0, 1, 2]

    def test_bounded(self, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
        cfg = config(tmp_path, enable=False, metrics=Metrics(enabled=True, log=True, log_max_mb=0.001))
        profiler = Profiler(cfg, role="actor", rank=0, world_size=1)
        with caplog.at_level(logging.WARNING, logger="profdsl"):
            run(profiler, range(40))
        profiler.close()
        [name] = log_files(tmp_path)
        assert 0 < (tmp_path / name).stat().st_size <= 1000
        assert "reached Metrics.log_max_mb" in caplog.text


def _safe_host() -> str:
    import re
    import socket

    return re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname())[:64]


class TestTriggerCommand:
    """``profdsl trigger``."""

    def test_writes_a_request(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        assert (
            main(
                [
                    "trigger",
                    str(tmp_path),
                    "--steps",
                    "2",
                    "--ranks",
                    "0-2,8",
                    "--roles",
                    "actor,rollout",
                    "--reason",
                    "spike",
                    "--id",
                    "t1",
                ]
            )
            == 0
        )
        data = json.loads((tmp_path / REQUESTS_DIR / "t1.json").read_text())
        assert {k: data[k] for k in ("id", "steps", "ranks", "roles", "reason", "source")} == {
            "id": "t1",
            "steps": 2,
            "ranks": [0, 1, 2, 8],
            "roles": ["actor", "rollout"],
            "reason": "spike",
            "source": "file",
        }
        assert "trace 2 steps from the next step each process begins on ranks 0, 1, 2, 8" in capsys.readouterr().out
        assert main(["trigger", str(tmp_path), "--steps", "1", "--id", "t1"]) == 2  # that id exists

    def test_usage_errors(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["trigger", str(tmp_path), "--steps", "0"]) == 2
        assert main(["trigger", str(tmp_path), "--steps", "1", "--ranks", "tp = 0"]) == 2
        capsys.readouterr()
        assert main(["trigger", str(tmp_path), "--steps", "1", "--ranks", "tp == "]) == 2
        # the selector's error: its first line names the problem, the next two point at it
        assert capsys.readouterr().err.splitlines() == [
            "profdsl: trigger: ranks: expected an integer or 'last', got the end at column 7",
            "  tp == ",
            "        ^",
        ]
        assert main(["trigger", str(tmp_path / "nope"), "--steps", "1"]) == 2
        assert "--create makes it" in capsys.readouterr().err
        assert main(["trigger", str(tmp_path / "new"), "--steps", "1", "--create"]) == 0
        assert not (tmp_path / REQUESTS_DIR).exists()
