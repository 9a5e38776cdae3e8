"""verl's own trainers' call sequences, driven through ``profdsl.integrations.verl``.

Each driver copies the order in which a verl trainer calls its workers (verl at the merge of
PR #7408): the PPO trainers' ``_start_profiling`` / ``_stop_profiling`` with
``profile_continuous_steps`` (``verl/trainer/ppo/ray_trainer.py``, ``ppo/v1/trainer_base.py``),
the SFT trainers' loop over ``trainer.profile_interval`` (``verl/trainer/sft_trainer.py``,
``sft_trainer_ray.py``), and a finish hook that is a script, as verl's end-to-end check uses.
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest

from profdsl.manifest import read_manifest

from .test_verl_facade import ActorRolloutRefWorker, verl_actor_config

torch = pytest.importorskip("torch")


def marker_script(folder: Path) -> Path:
    """A finish hook written as verl's end-to-end marker script: it fails unless
    ``VERL_PROFILE_SAVE_PATH`` (and the rest) are exported to it."""
    script = folder / "finish_hook.sh"
    script.write_text(
        "#!/bin/sh\n"
        'if [ -z "${VERL_PROFILE_SAVE_PATH:-}" ]; then\n'
        '  echo "VERL_PROFILE_SAVE_PATH is not exported" >&2\n'
        "  exit 1\n"
        "fi\n"
        'echo "$VERL_PROFILE_RANK $VERL_PROFILE_ROLE $VERL_PROFILE_TOOL" > "$VERL_PROFILE_SAVE_PATH/finish_hook_ran"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def hook_records(save_path: Path) -> list[dict[str, Any]]:
    return [r for r in read_manifest(save_path) if r["kind"] == "hook"]


# --- 1. a finish hook that is a script --------------------------------------------------------


def test_a_script_hook_sees_verls_variables(tmp_path: Path) -> None:
    """The command's text does not name ``VERL_PROFILE_*``: the script still gets them."""
    save = tmp_path / "profile"
    script = marker_script(tmp_path)
    config = verl_actor_config(save, f"global_profiler.finish_hook_cmd={script}")
    worker = ActorRolloutRefWorker(config, rank=0, world_size=1)
    for step in (1, 2):
        worker.start_profile(role="train", profile_step=step)
        worker.compute_log_prob([1, 2])
        worker.stop_profile(run_command=step == 2)
    worker.finish_profile()
    assert [r["exit_code"] for r in hook_records(save)] == [0]
    assert (save / "finish_hook_ran").read_text().split() == ["0", "actor", "torch"]
