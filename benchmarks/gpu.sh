#!/usr/bin/env bash
# The GPU records: each benchmark named on the command line (default: all of them below) runs with --device cuda
# and writes $RESULTS_DIR/<name>.json (default benchmarks/results/gpu/, which the book's benchmark page shows beside
# the CPU records).
# A step that fails or passes its time limit (seconds, after the name) is reported and the next one runs.
#     bash benchmarks/gpu.sh ntk_trained:90 nngp_device:200
set -u
cd "$(dirname "$0")/.."
results=${RESULTS_DIR:-benchmarks/results/gpu}
mkdir -p "$results"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" BNSYM_PROGRESS=0 PYTHONUNBUFFERED=1
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(ntk_trained:120 ntk_accuracy:200 nngp_device:240 digits_end_to_end:150
                                 sampler_speed:120 ntk_finite_width:200)
for step in "${steps[@]}"; do
    name=${step%%:*} limit=${step#*:} options=()
    case $name in
        digits_end_to_end) options=(--threads 8 --repeats 2) ;;
        nngp_device) options=(--set budget=$((limit * 2 / 3))) ;;
        ntk_finite_width) options=(--set widths=256,512,1024,2048,4096 --set seeds=64) ;;
    esac
    start=$(date +%s)
    timeout "$limit" python3 "benchmarks/$name.py" --device cuda "${options[@]}" \
        --output "$results/$name.json"
    echo "== $name: exit $? after $(( $(date +%s) - start )) s"
done
