#!/bin/bash
# The checks to run first on a GPU (or XPU) node, one after another, each within a time limit, every log kept:
# what torch sees, the GPU tests, the default training on one device, and the epoch bench (batches built on the
# host and on the device, and PyG's NeighborLoader where it can run). Run from the repository root, after
# installing mpignn:
#   bash jobs/gpu_check.sh [OUT]            # logs in OUT (default gpu-check/); exit 1 if any step failed
# DEVICE (cuda or xpu, default cuda), LIMIT (seconds per step, default 240), PYTHON and MPIEXEC change them.
set -uo pipefail
out=${1:-gpu-check}
device=${DEVICE:-cuda}
limit=${LIMIT:-240}
py=${PYTHON:-python3}
mpiexec=${MPIEXEC:-mpiexec}
mkdir -p "$out"
failed=()

step() {  # step NAME CMD...: CMD's output in OUT/NAME.log, its exit code and time on stdout
    local name=$1 start=$SECONDS rc
    shift
    echo "== $name: $*"
    timeout "$limit" "$@" >"$out/$name.log" 2>&1
    rc=$?
    echo "   exit $rc after $((SECONDS - start)) s (124: over LIMIT=$limit s); the log ends:"
    tail -n 12 "$out/$name.log" | sed 's/^/   /'
    if ((rc != 0)); then failed+=("$name"); fi
}

step env "$py" -c "import sys, torch, torch_geometric, mpi4py; import mpignn; \
mod = getattr(torch, '$device', None); \
print(sys.version.split()[0], 'torch', torch.__version__, 'torch_geometric', torch_geometric.__version__, \
'mpi4py', mpi4py.__version__); \
print('$device available:', bool(mod and mod.is_available()), mod.get_device_name(0) if mod and mod.is_available() else '')"
step pytest-gpu "$py" -m pytest -m gpu -q -p no:cacheprovider tests
step train "$mpiexec" -n 1 "$py" -m mpignn.train --device "$device" --epochs 5 --metrics-out "$out/train.jsonl"
step bench-epoch "$py" -m mpignn.bench.epoch --device "$device"
if ((${#failed[@]})); then
    echo "gpu_check: failed: ${failed[*]} (logs in $out/)"
    exit 1
fi
echo "gpu_check: every step passed (logs in $out/)"
