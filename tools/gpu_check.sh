#!/usr/bin/env bash
# The GPU check of issue 29: on a CUDA machine with the project installed
# (pip install -c constraints.txt -e '.[test]'), run
#   1. tests/gpu            (marker gpu: device maps, CUDA run worlds, the scenarios on the GPU, nothing left on it)
#   2. the main job on the GPU: rpc-harness run all --device cuda (each scenario and its fault checks)
#   3. the whole suite      (pytest -n auto, tests/gpu's idiomatic skipif module included)
#   4. if it failed: its failed tests again, alone (pytest --lf, one process)
# and print what ran and what passed. Exit 0 only when every step passed and
# tests/gpu skipped nothing. Refuses (exit 2) where CUDA is not available.
# Run on an H200 (2026-11-26) and an H100 (2026-11-27; about 8 minutes on its
# 16 cores, the whole suite 339 s of them; what passed: docs/benchmarks.md). Failures are
# written to OUT_DIR/failures.log as they happen (tests/failure_log.py): a
# suite stopped at a time limit still says why its tests failed.
#
# Usage: tools/gpu_check.sh [OUT_DIR]   (default: rpc-harness-out/gpu-check)
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-rpc-harness-out/gpu-check}"
mkdir -p "$out"
if [ -x .venv/bin/python ]; then bin=.venv/bin/; else bin=""; fi
py="${bin}python"
[ -x .venv/bin/python ] || py=python3

if ! "$py" -c 'import sys, rpc_harness; sys.exit(0 if rpc_harness.cuda_available() else 1)'; then
    echo "gpu_check: CUDA is not available here (rpc_harness.cuda_available() is False): nothing run" >&2
    exit 2
fi
"$py" - <<'PY' | tee "$out/machine.txt"
import subprocess, sys, torch
print(f"python {sys.version.split()[0]}, torch {torch.__version__}")
print(subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                     capture_output=True, text=True).stdout.strip() or "nvidia-smi: no output")
PY

declare -a names codes notes

counts() {  # passed/failed/skipped/errors of a junit xml file
    "$py" - "$1" <<'PY'
import sys, xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except Exception as error:  # noqa: BLE001
    print(f"no junit report ({error})"); sys.exit(0)
suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
n = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
print(f"{n['tests'] - n['failures'] - n['errors'] - n['skipped']} passed, {n['failures']} failed, "
      f"{n['errors']} errors, {n['skipped']} skipped")
PY
}

step() {  # step NAME LOG -- command...
    local name="$1" log="$2"; shift 3
    echo; echo "=== gpu_check: $name: $*"
    "$@" 2>&1 | tee "$log"
    local code=${PIPESTATUS[0]}
    names+=("$name"); codes+=("$code")
    echo "=== gpu_check: $name: exit $code"
}

export RPC_HARNESS_FAILURE_LOG="$out/failures.log"
step "tests/gpu" "$out/tests-gpu.log" -- "${bin}pytest" tests/gpu -m gpu -rs -v --junitxml="$out/tests-gpu.xml"
gpu_counts=$(counts "$out/tests-gpu.xml"); notes+=("$gpu_counts")
step "rpc-harness run all --device cuda" "$out/run-device-cuda.log" -- \
    "${bin}rpc-harness" run all --device cuda --seed 1 --progress lines --out "$out/run"
notes+=("$(grep -E '^(ok|FAILED):' "$out/run-device-cuda.log" | wc -l) worlds reported, $(grep -c '^FAILED:' "$out/run-device-cuda.log") failed")
step "whole suite" "$out/suite.log" -- "${bin}pytest" -n auto -v --tb=short -rfEs --durations=15 --junitxml="$out/suite.xml"
notes+=("$(counts "$out/suite.xml")")
if [ "${codes[-1]}" != 0 ] && [ -s "$out/suite.xml" ]; then
    # Tests that failed in the whole suite, again on their own (one worker):
    # "fails alone too" and "fails only beside the others" are different bugs.
    step "the suite's failures, alone" "$out/suite-failures-alone.log" -- "${bin}pytest" --lf --lfnf=none -p no:randomly -v \
        --tb=short -rfE --junitxml="$out/suite-failures-alone.xml"
    notes+=("$(counts "$out/suite-failures-alone.xml")")
fi

echo
echo "=== gpu_check summary ($(date -u +%Y-%m-%dT%H:%MZ); logs in $out)"
cat "$out/machine.txt"
status=0
for i in "${!names[@]}"; do
    verdict=PASSED; [ "${codes[$i]}" = 0 ] || { verdict=FAILED; status=1; }
    printf '  %-36s %-6s exit %s  (%s)\n' "${names[$i]}" "$verdict" "${codes[$i]}" "${notes[$i]}"
done
[ -s "$out/failures.log" ] && { echo "  failures, as they happened ($out/failures.log):"; grep "^=== " "$out/failures.log" | sed "s/^/    /"; }
case "$gpu_counts" in
    *" 0 skipped"*) ;;
    *) echo "  tests/gpu skipped some tests: not a full GPU check"; status=1 ;;
esac
exit $status
