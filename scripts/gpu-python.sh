#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The Python package on a GPU (one unattended run): `pip install .` into a virtual environment
# that sees the system's PyTorch, then tests/gpu/python_module_torch.py under the installed
# launcher, with PyTorch's cache on top of ours and with PYTORCH_NO_CUDA_MEMORY_CACHING=1: the
# module's figures against torch.cuda.memory_stats(). Where meson-python is missing (no network to
# fetch it), the build tree's launcher and the checkout's module stand in, and the log says so.
#
# Environment: CCI_GPU_OUT (default build-gpu/out/), PYTHON (the interpreter with torch).
# Output: $CCI_GPU_OUT/python-module-{default,no-caching}.json (every figure, every check) and
# their -report.json (the library's report at the same moment); one PASS/FAIL line per check.
set -u -o pipefail
# shellcheck source=scripts/gpu-common.sh
source "$(dirname "$0")/gpu-common.sh"

"$PYTHON" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null ||
    { cci_say "no PyTorch with CUDA for $PYTHON"; exit 1; }
cci_build_preload || exit 1
venv=$CCI_ROOT/$CCI_BUILD/venv
if "$PYTHON" -c 'import mesonpy' 2>/dev/null; then
    rm -rf "$venv"
    cci_run 60 "$CCI_GPU_OUT/python-venv.log" "$PYTHON" -m venv --system-site-packages "$venv" || exit 1
    cci_run 300 "$CCI_GPU_OUT/python-pip.log" "$venv/bin/python" -m pip install --no-build-isolation \
        --no-index --disable-pip-version-check . || exit 1
    launcher=$venv/bin/ccinterpose py=$venv/bin/python
    cci_say "installed with pip into $venv"
else
    launcher=$CCI_ROOT/$CCI_BUILD/scripts/ccinterpose py=$PYTHON
    export PYTHONPATH=$CCI_ROOT/python${PYTHONPATH:+:$PYTHONPATH}
    cci_say "meson-python missing for $PYTHON: the build tree's launcher and the checkout's module instead"
fi

rc=0
for mode in default no-caching; do
    env=(CCI_REPORT=off)
    [[ $mode == no-caching ]] && env+=(PYTORCH_NO_CUDA_MEMORY_CACHING=1)
    cci_run 180 "$CCI_GPU_OUT/python-module-$mode.log" env "${env[@]}" "$launcher" -- "$py" \
        tests/gpu/python_module_torch.py "$CCI_GPU_OUT/python-module-$mode.json" || rc=1
    sed 's/^/    /' "$CCI_GPU_OUT/python-module-$mode.log" | grep -E '(PASS|FAIL):'
done
cci_say "python module on the GPU: $([[ $rc == 0 ]] && echo PASSED || echo FAILED)"
exit $rc
