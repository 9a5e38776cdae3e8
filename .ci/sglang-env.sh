#!/usr/bin/env bash
# Optional (not run by .ci/run): make the real SGLang engine's test environment, .sglang-venv, from
# a clean clone, and run its test (docs/rollout.md, "SGLang on CPU"). About 2.6 GB, a few minutes.
#
#   bash .ci/sglang-env.sh          # make the environment and run tests/test_sglang_engine.py
#   bash .ci/sglang-env.sh --no-test
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1

venv=.sglang-venv
rm -rf "$venv"
python3 -m venv "$venv"
py="$venv/bin/python"
# The CPU build of torch first; everything else pinned and without the resolver (which would pull
# torch 2.14 and the CUDA stack for SGLang).
"$py" -m pip install -q -c .ci/constraints.txt torch
"$py" -m pip install -q --no-deps -r .ci/engines-sglang.txt
"$py" -m pip install -q --no-deps -e .
# The stand-ins for sgl_kernel and torchvision (tests/sglang_stubs/), on this environment's path only.
site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$PWD/tests/sglang_stubs" >"$site/profdsl-sglang-stubs.pth"
SGLANG_USE_CPU_ENGINE=1 "$py" -c 'import torch, sglang; from sglang.srt.entrypoints.engine import Engine; assert not torch.version.cuda; print("sglang", sglang.__version__)'

if [[ "${1:-}" != "--no-test" ]]; then
    "$py" -m pytest -p no:cacheprovider -rs tests/test_sglang_engine.py
fi
