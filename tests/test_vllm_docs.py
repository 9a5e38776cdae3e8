"""docs/rollout.md makes vLLM's CPU environment as CI makes it (.ci/engines-vllm.txt, made by
.ci/run): torch and the pinned list in one call without the resolver, then profdsl without its
dependencies, then the engine tests .ci/run runs there."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "rollout.md").read_text()


def test_the_vllm_environment_is_made_as_ci_makes_it() -> None:
    run = (ROOT / ".ci" / "run").read_text()
    assert '-m pip install -q --no-compile --no-deps -c .ci/constraints.txt torch -r "$2"' in run
    assert 'engine_env "$engines" .ci/engines-vllm.txt' in run and "engines=.ci-engines-venv" in run
    tests = "-m pytest -p no:cacheprovider -rs tests/test_vllm_engine.py tests/test_vllm_adapter.py"
    assert f'"$engines/bin/python" {tests}' in run
    block = DOC[DOC.index("## Running a real engine on CPU") :]
    block = block[: block.index("### SGLang on CPU")]
    commands = re.findall(r"^\.ci-engines-venv/bin/python (.+?)(?:\s+#.*)?$", block, re.MULTILINE)
    assert commands == [
        "-m pip install --no-deps -c .ci/constraints.txt torch -r .ci/engines-vllm.txt",
        "-m pip install --no-deps -e .",
        tests,
    ]
    assert "pip install --no-deps -r .ci/engines-vllm.txt" not in block  # the two-call form is gone
