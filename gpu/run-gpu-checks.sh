#!/usr/bin/env bash
# ordo-gpu on a CUDA machine, in two halves (see gpu/README.md, "Running on a CUDA machine").
#
#   gpu/run-gpu-checks.sh pack [PACK]                   # here, with cargo (default PACK: gpu-pack)
#   gpu/run-gpu-checks.sh run  [PACK [OUT [STEP...]]]   # on the GPU machine (default OUT: gpu-results)
#
# pack builds release binaries of every GPU test (ordo-gpu's cuda_* tests, ordo-tests'
# e2e_kge_gpu), ordo-train, kge_roofline and gpu_bench, and the Python binding's wheel with
# --features cuda (abi3: any CPython >= 3.9 takes it; maturin from $MATURIN, default `maturin`)
# with its device checks; strips them into PACK with the datasets
# and config the run reads, lists each test binary's #[ignore]d (GPU) tests into
# PACK/expected-tests.txt, prints the sizes and fails if the folder is over PACK_BUDGET_MIB
# (default 48) of the 64 MiB a GPU machine can be sent.
#
# run needs only PACK (no cargo, no registry, no network). It checks the pack, then the machine
# (nvidia-smi, libcuda, NVRTC, compute-sanitizer when ORDO_GPU_SANITIZE=1) and stops there,
# naming what is missing; then the steps (all by default, or those named):
#   tests     every GPU test binary with --ignored and ORDO_REQUIRE_GPU=1; each must pass
#             exactly the number of tests pack listed (0 run is a failure, not a pass)
#   sanitize  compute-sanitizer memcheck, racecheck, synccheck on each test binary
#             (only with ORDO_GPU_SANITIZE=1)
#   bench     gpu_bench --quick, then the full bench on WordNet 3.0 (ceilings, kernels as a
#             fraction of the D2D copy and of the rated bandwidth, Sync/Async/Oac)
#   roofline  kge_roofline --device cuda --modes sync,oac --epochs 2
#   train     ordo-train on train/configs/wordnet30-complex-throughput.toml: sync, async, oac
#             with --device cuda, and the same three on the CPU as the baseline
#   python    the Python binding's device checks (python/tests/gpu_device_checks.py) with the
#             pack's wheel, ORDO_REQUIRE_GPU=1 and the machine's python3 and torch: every check
#             must pass (no torch, or a torch that sees no GPU, fails)
# and three steps sized for a short GPU window, each runnable alone (so a rerun of one fits):
#   correctness  tests + sanitize (sanitizer on), within CORRECTNESS_LIMIT_S (default 120 s)
#   measures     bench + roofline + train, within MEASURES_LIMIT_S (default 180 s)
#   device-python  python, within PYTHON_LIMIT_S (default 180 s)
# Each runs the script again on its own steps under `timeout`, into OUT/correctness or
# OUT/measures; over its limit it is stopped and fails (what it wrote stays).
# Everything goes to OUT (logs, markdown for BENCHMARKS.md, SUMMARY.md). Exit status 0 only if
# every step that ran passed.
set -uo pipefail

readonly CONFIG=train/configs/wordnet30-complex-throughput.toml
readonly DATASETS=${ORDO_DATASETS:-../shared/datasets}
readonly CARRY_LIMIT_MIB=64
readonly PACK_BUDGET_MIB=${PACK_BUDGET_MIB:-48}
readonly ALL_STEPS="tests sanitize bench roofline train python"
readonly WINDOW_STEPS="correctness measures device-python"
readonly CORRECTNESS_LIMIT_S=${CORRECTNESS_LIMIT_S:-120}
readonly MEASURES_LIMIT_S=${MEASURES_LIMIT_S:-180}
readonly PYTHON_LIMIT_S=${PYTHON_LIMIT_S:-180}
readonly PY_CHECKS=python/tests/gpu_device_checks.py
# This script, which `within` runs again on a window's steps.
RUN_SELF=${BASH_SOURCE[0]}

die() {
    echo "run-gpu-checks: $*" >&2
    exit 1
}

mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }

# ---------------------------------------------------------------------------------------------
# pack
# ---------------------------------------------------------------------------------------------

# The executables of the artifacts cargo reports as JSON on stdin, as "target-name<TAB>path";
# only test harnesses when $1 is "test".
executables() {
    python3 -c '
import json, sys
want_test = sys.argv[1] == "test"
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    if m["profile"]["test"] == want_test:
        print(m["target"]["name"] + "\t" + m["executable"])
' "$1"
}

pack() {
    local pack=${1:-gpu-pack}
    local missing=() maturin=${MATURIN:-maturin}
    for tool in cargo strip python3 du "$maturin"; do
        command -v "$tool" >/dev/null || missing+=("$tool")
    done
    [[ ${#missing[@]} -eq 0 ]] || die "pack needs: ${missing[*]}"
    [[ -f $DATASETS/wordnet30/train.txt ]] || die "no $DATASETS/wordnet30/train.txt (set ORDO_DATASETS)"

    local json list
    json=$(mktemp)
    list=$(mktemp)
    # The GPU test binaries, as `cargo test` builds them (release, with the harness); then the
    # binaries the run calls.
    nice cargo test --release --no-run --message-format=json -p ordo-gpu --test 'cuda_*' >"$json" ||
        die "building ordo-gpu's cuda_* tests failed"
    executables test <"$json" | sed 's/^/test\t/' >>"$list"
    nice cargo test --release --no-run --message-format=json -p ordo-tests --test e2e_kge_gpu \
        >"$json" || die "building ordo-tests' e2e_kge_gpu failed"
    executables test <"$json" | sed 's/^/test\t/' >>"$list"
    nice cargo build --release --message-format=json -p ordo-train --bin ordo-train \
        --bin kge_roofline >"$json" || die "building ordo-train and kge_roofline failed"
    executables bin <"$json" | sed 's/^/bin\t/' >>"$list"
    nice cargo build --release --message-format=json -p ordo-gpu --bin gpu_bench >"$json" ||
        die "building gpu_bench failed"
    executables bin <"$json" | sed 's/^/bin\t/' >>"$list"

    rm -rf "$pack"
    mkdir -p "$pack/bin" "$pack/tests" "$pack/datasets" "$pack/configs" "$pack/python"
    # The Python binding with CUDA support, in a target folder of its own (python/ is a
    # workspace of its own), and its device checks.
    local py_target
    py_target="$(realpath -m "${CARGO_TARGET_DIR:-target}")/python"
    CARGO_TARGET_DIR="$py_target" nice "$maturin" build --release --features cuda \
        -m python/Cargo.toml -i python3 -o "$pack/python" >&2 ||
        die "building the Python wheel (maturin build --features cuda) failed"
    cp "$PY_CHECKS" "$pack/python/"
    local kind name path
    while IFS=$'\t' read -r kind name path; do
        if [[ $kind == test ]]; then
            cp "$path" "$pack/tests/$name"
        else
            cp "$path" "$pack/bin/$name"
        fi
    done <"$list"
    rm -f "$json" "$list"
    for want in bin/ordo-train bin/kge_roofline bin/gpu_bench tests/e2e_kge_gpu; do
        [[ -x $pack/$want ]] || die "cargo reported no executable for $want"
    done
    strip "$pack"/bin/* "$pack"/tests/* || die "strip failed"

    # What each GPU test binary must run on the GPU machine: its #[ignore]d tests.
    : >"$pack/expected-tests.txt"
    local t n
    for t in "$pack"/tests/*; do
        n=$("$t" --list --ignored 2>/dev/null | grep -c ': test$')
        [[ $n -gt 0 ]] || die "$(basename "$t") lists no #[ignore]d test: nothing to run on a GPU"
        echo "$(basename "$t") $n" >>"$pack/expected-tests.txt"
    done
    [[ $(wc -l <"$pack/expected-tests.txt") -ge 8 ]] ||
        die "fewer GPU test binaries than the 7 cuda_* + e2e_kge_gpu expected"

    cp -r "$DATASETS/wordnet30" "$pack/datasets/wordnet30"
    chmod -R u+w "$pack/datasets"
    cp "$CONFIG" "$pack/configs/"
    {
        echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
        echo "rustc $(rustc --version 2>/dev/null)"
        echo "packed $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    } >"$pack/MANIFEST"

    echo "| file | bytes | MiB |"
    echo "|---|---:|---:|"
    local f b total=0
    for f in "$pack"/bin/* "$pack"/tests/* "$pack"/python/* "$pack/datasets/wordnet30" "$pack/configs" "$pack/expected-tests.txt" "$pack/MANIFEST"; do
        b=$(du -sb "$f" | cut -f1)
        echo "| ${f#"$pack"/} | $b | $(mib "$b") |"
    done
    total=$(du -sb "$pack" | cut -f1)
    echo "| **total ($pack)** | $total | $(mib "$total") |"
    echo
    echo "expected GPU tests:"
    sed 's/^/  /' "$pack/expected-tests.txt"
    local budget=$((PACK_BUDGET_MIB * 1048576))
    if [[ $total -gt $budget ]]; then
        die "$pack is $(mib "$total") MiB: over the budget of $PACK_BUDGET_MIB MiB (carry limit $CARRY_LIMIT_MIB MiB)"
    fi
    echo "$pack: $(mib "$total") MiB of the $CARRY_LIMIT_MIB MiB carry limit ($(mib $((CARRY_LIMIT_MIB * 1048576 - total))) MiB to spare; budget $PACK_BUDGET_MIB MiB)"
}

# ---------------------------------------------------------------------------------------------
# run
# ---------------------------------------------------------------------------------------------

# Directories a CUDA library may be in, beyond the loader's cache.
lib_dirs() {
    tr ':' '\n' <<<"${LD_LIBRARY_PATH:-}"
    echo /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib /lib/x86_64-linux-gnu /usr/lib/wsl/lib
    ls -d /usr/local/cuda*/lib64 /usr/local/cuda*/targets/*/lib /usr/local/cuda*/compat \
        /usr/local/lib/python3*/dist-packages/nvidia/cu*/lib \
        /usr/local/lib/python3*/dist-packages/nvidia/cuda_nvrtc/lib \
        /usr/lib/python3*/dist-packages/nvidia/cuda_nvrtc/lib /opt/conda/lib 2>/dev/null
}

# The first file whose name matches the glob $1, in the loader's cache or in lib_dirs.
find_lib() {
    local name rest d f ldconfig
    ldconfig=$(command -v ldconfig || echo /sbin/ldconfig)
    while read -r name rest; do
        [[ $name == $1 && -e ${rest##* } ]] && { echo "${rest##* }"; return 0; }
    done < <("$ldconfig" -p 2>/dev/null | tail -n +2)
    while read -r d; do
        [[ -d $d ]] || continue
        for f in "$d"/$1; do
            [[ -e $f ]] && { echo "$f"; return 0; }
        done
    done < <(lib_dirs | tr ' ' '\n')
    return 1
}

LOG=/dev/null
FAILED=()
log() { echo "$*" | tee -a "$LOG"; }
step() { log ""; log "== $* ($(date -u +%H:%M:%S))"; }
fail() {
    FAILED+=("$1")
    log "FAILED: $1"
}

# The pack is complete (nothing on the machine is used yet).
check_pack() {
    local pack=$1 missing=() name n
    [[ -f $pack/expected-tests.txt ]] || die "$pack/expected-tests.txt missing: run 'gpu/run-gpu-checks.sh pack' first"
    for f in bin/ordo-train bin/kge_roofline bin/gpu_bench; do
        [[ -x $pack/$f ]] || missing+=("$pack/$f")
    done
    while read -r name n; do
        [[ -x $pack/tests/$name && $n -gt 0 ]] || missing+=("$pack/tests/$name")
    done <"$pack/expected-tests.txt"
    for f in datasets/wordnet30/train.txt datasets/wordnet30/valid.txt datasets/wordnet30/test.txt \
        configs/wordnet30-complex-throughput.toml "python/$(basename "$PY_CHECKS")"; do
        [[ -f $pack/$f ]] || missing+=("$pack/$f")
    done
    compgen -G "$pack/python/ordo-*-abi3-*.whl" >/dev/null || missing+=("$pack/python/ordo-*-abi3-*.whl")
    [[ ${#missing[@]} -eq 0 ]] || die "the pack is incomplete: ${missing[*]}"
    log "pack: $(cat "$pack/MANIFEST" | tr '\n' ';') $(mib "$(du -sb "$pack" | cut -f1)") MiB, reads $(mib "$(du -sb "$pack/datasets" | cut -f1)") MiB of datasets"
}

# What the GPU steps need on this machine; every missing thing is named, then the run stops.
check_machine() {
    local out=$1 sanitize=$2 missing=() cuda nvrtc ok_name=
    command -v nvidia-smi >/dev/null ||
        missing+=("nvidia-smi (the NVIDIA driver's tool: no driver installed, or not on PATH)")
    if cuda=$(find_lib 'libcuda.so*'); then
        log "driver library: $cuda"
    else
        missing+=("libcuda.so.1 (the CUDA driver library) in the loader's cache or LD_LIBRARY_PATH")
    fi
    # cudarc (built for CUDA 12.8) opens libnvrtc.so, libnvrtc.so.12, .11, .10, .9 or .1.
    for n in 'libnvrtc.so' 'libnvrtc.so.12' 'libnvrtc.so.1[10]' 'libnvrtc.so.9' 'libnvrtc.so.1'; do
        nvrtc=$(find_lib "$n") && { ok_name=yes; break; }
    done
    if [[ -z $ok_name ]] && nvrtc=$(find_lib 'libnvrtc.so.[0-9]*'); then
        # e.g. CUDA 13's libnvrtc.so.13 only: offer it under a name cudarc opens.
        mkdir -p "$out/lib"
        ln -sf "$nvrtc" "$out/lib/libnvrtc.so"
        export LD_LIBRARY_PATH="$PWD/$out/lib:$(dirname "$nvrtc"):${LD_LIBRARY_PATH:-}"
        log "NVRTC: $nvrtc, linked as $out/lib/libnvrtc.so"
    elif [[ -n $ok_name ]]; then
        export LD_LIBRARY_PATH="$(dirname "$nvrtc"):${LD_LIBRARY_PATH:-}"
        log "NVRTC: $nvrtc"
    else
        missing+=("libnvrtc.so* (NVRTC, which compiles the kernels at run time: CUDA toolkit or the nvidia-cuda-nvrtc wheel)")
    fi
    # cuBLAS (the chunk products, tests/cuda_blas.rs): cudarc opens libcublas.so or .so.12, …;
    # a CUDA-13-only libcublas.so.13 (e.g. the nvidia-cublas wheel) is linked as libcublas.so.
    local cublas
    if cublas=$(find_lib 'libcublas.so') || cublas=$(find_lib 'libcublas.so.12'); then
        export LD_LIBRARY_PATH="$(dirname "$cublas"):${LD_LIBRARY_PATH:-}"
        log "cuBLAS: $cublas"
    elif cublas=$(find_lib 'libcublas.so.[0-9]*'); then
        mkdir -p "$out/lib"
        ln -sf "$cublas" "$out/lib/libcublas.so"
        export LD_LIBRARY_PATH="$PWD/$out/lib:$(dirname "$cublas"):${LD_LIBRARY_PATH:-}"
        log "cuBLAS: $cublas, linked as $out/lib/libcublas.so"
    else
        missing+=("libcublas.so* (cuBLAS, loaded at run time: CUDA toolkit or the nvidia-cublas wheel)")
    fi
    if [[ $sanitize == 1 ]]; then
        local cs
        cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
        if [[ -n $cs ]]; then
            SANITIZER=$cs
            log "compute-sanitizer: $cs"
        else
            missing+=("compute-sanitizer (ORDO_GPU_SANITIZE=1; in the CUDA toolkit's bin/)")
        fi
    fi
    if [[ ${#missing[@]} -gt 0 ]]; then
        local m
        for m in "${missing[@]}"; do log "missing: $m"; done
        fail "GPU prerequisites: ${#missing[@]} missing on $(hostname)"
        return 1
    fi
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.memory,pcie.link.gen.max \
        --format=csv 2>&1 | tee "$out/gpu.csv" | tee -a "$LOG" || {
        fail "nvidia-smi cannot query the GPU"
        return 1
    }
}

# Run one GPU test binary; pass only if it passed exactly the expected number of tests.
run_test_binary() {
    local pack=$1 out=$2 name=$3 expected=$4 status passed failed
    ORDO_REQUIRE_GPU=1 RUST_BACKTRACE=1 "$pack/tests/$name" --ignored --test-threads 1 --nocapture \
        >"$out/tests/$name.log" 2>&1
    status=$?
    passed=$(sed -n 's/^test result: .* \([0-9][0-9]*\) passed.*/\1/p' "$out/tests/$name.log" | awk '{ s += $1 } END { print s + 0 }')
    failed=$(sed -n 's/^test result: .* \([0-9][0-9]*\) failed.*/\1/p' "$out/tests/$name.log" | awk '{ s += $1 } END { print s + 0 }')
    log "$name: exit $status, $passed passed of $expected expected, $failed failed"
    if [[ $status -ne 0 || $failed -ne 0 || $passed -ne $expected || $passed -eq 0 ]]; then
        grep -E '^(---- |thread .* panicked|  left|  right|no CUDA device)' "$out/tests/$name.log" | head -20 | tee -a "$LOG"
        fail "tests: $name"
    fi
    echo "| $name | $expected | $passed | $failed | $status |" >>"$out/tests.md"
}

step_tests() {
    local pack=$1 out=$2 name n
    mkdir -p "$out/tests"
    echo "| test binary | expected | passed | failed | exit |" >"$out/tests.md"
    echo "|---|---:|---:|---:|---:|" >>"$out/tests.md"
    while read -r name n; do
        run_test_binary "$pack" "$out" "$name" "$n"
    done <"$pack/expected-tests.txt"
    grep -h "GPU vs CPU replay" "$out/tests/"*.log 2>/dev/null | tee -a "$LOG"
}

step_sanitize() {
    local pack=$1 out=$2 name n tool
    mkdir -p "$out/sanitizer"
    while read -r name n; do
        for tool in memcheck racecheck synccheck; do
            local extra=()
            [[ $tool == memcheck ]] && extra=(--leak-check full)
            [[ $tool == racecheck ]] && extra=(--racecheck-report all)
            # ORDO_UNDER_SANITIZER: cuda_bandwidth then skips its lower bound on the copy's
            # speed, which the instrumentation alone breaks (memcheck: 187 GB/s on an H100).
            if ORDO_REQUIRE_GPU=1 ORDO_UNDER_SANITIZER=1 "$SANITIZER" --tool "$tool" "${extra[@]}" --error-exitcode 1 \
                "$pack/tests/$name" --ignored --test-threads 1 >"$out/sanitizer/$name.$tool.log" 2>&1; then
                log "$tool $name: clean"
            else
                tail -5 "$out/sanitizer/$name.$tool.log" | tee -a "$LOG"
                fail "compute-sanitizer $tool: $name"
            fi
        done
    done <"$pack/expected-tests.txt"
}

step_bench() {
    local pack=$1 out=$2
    "$pack/bin/gpu_bench" --quick --wordnet "$pack/datasets/wordnet30/train.txt" \
        >"$out/gpu_bench-quick.md" 2>"$out/gpu_bench-quick.err" || fail "gpu_bench --quick"
    "$pack/bin/gpu_bench" --table-rows 10000000 --width 128 --batch-rows 4096 --depth 4 \
        --wordnet "$pack/datasets/wordnet30/train.txt" >"$out/gpu_bench.md" 2>"$out/gpu_bench.err" ||
        fail "gpu_bench"
    grep -E '^\| (rated|D2D|validate|insert|evict|KGE chunked)' "$out/gpu_bench.md" | tee -a "$LOG"
}

step_roofline() {
    local pack=$1 out=$2
    "$pack/bin/kge_roofline" --device cuda --modes sync,oac --epochs 2 \
        --dataset "$pack/datasets/wordnet30" >"$out/kge_roofline.md" 2>"$out/kge_roofline.err" ||
        fail "kge_roofline --device cuda"
    tail -15 "$out/kge_roofline.md" | tee -a "$LOG"
}

step_train() {
    local pack=$1 out=$2 device mode tps
    mkdir -p "$out/train"
    echo "| device | mode | triples/s |" >"$out/train.md"
    echo "|---|---|---:|" >>"$out/train.md"
    for device in cuda cpu; do
        for mode in sync async oac; do
            if "$pack/bin/ordo-train" kge --quiet --config "$pack/configs/wordnet30-complex-throughput.toml" \
                --dataset "$pack/datasets/wordnet30" --mode "$mode" --device "$device" \
                --out "$out/train/$device-$mode" >"$out/train/$device-$mode.log" 2>&1; then
                tps=$(sed -n 's/.*(\([0-9][0-9]*\) triples\/s).*/\1/p' "$out/train/$device-$mode.log" | tail -1)
                [[ -n $tps ]] || fail "ordo-train --device $device --mode $mode printed no triples/s"
            else
                tps=failed
                tail -5 "$out/train/$device-$mode.log" | tee -a "$LOG"
                fail "ordo-train --device $device --mode $mode"
            fi
            log "$device $mode: $tps triples/s"
            echo "| $device | $mode | $tps |" >>"$out/train.md"
            eval "TPS_${device}_${mode}=\${tps}"
        done
    done
    # Goals of paper 000 (issue 35): on the GPU, oac ≥ 1.8× sync and ≥ 0.95× async.
    awk -v o="${TPS_cuda_oac:-}" -v s="${TPS_cuda_sync:-}" -v a="${TPS_cuda_async:-}" -v c="${TPS_cpu_oac:-}" 'BEGIN {
        if (o + 0 > 0 && s + 0 > 0 && a + 0 > 0 && c + 0 > 0)
            printf "\ncuda oac / cuda sync = %.2f (goal >= 1.8), cuda oac / cuda async = %.2f (goal >= 0.95), cuda oac / cpu oac = %.2f\n", o / s, o / a, o / c
    }' | tee -a "$out/train.md" | tee -a "$LOG"
}

# The Python binding's device checks: the pack's wheel unpacked (a wheel is a zip; abi3, so
# the machine's python3 takes it) and put first on PYTHONPATH; the checks print
# "passed N of M" and pass only with every check run and passed.
step_python() {
    local pack=$1 out=$2 wheel lib status line
    mkdir -p "$out/python"
    if ! command -v python3 >/dev/null; then
        fail "python: no python3 on this machine"
        return
    fi
    wheel=$(ls "$pack"/python/ordo-*-abi3-*.whl | head -1)
    lib=$out/python/lib
    rm -rf "$lib"
    python3 -m zipfile -e "$wheel" "$lib" || { fail "python: cannot unpack $wheel"; return; }
    log "python: $(python3 --version 2>&1), $(basename "$wheel"), torch $(python3 -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)' 2>&1 | tail -1)"
    ORDO_REQUIRE_GPU=1 PYTHONPATH="$lib${PYTHONPATH:+:$PYTHONPATH}" \
        python3 "$pack/python/$(basename "$PY_CHECKS")" >"$out/python/checks.log" 2>&1
    status=$?
    line=$(grep -E '^passed [0-9]+ of [0-9]+$' "$out/python/checks.log" | tail -1)
    log "python device checks: exit $status, ${line:-no count printed}"
    if [[ $status -ne 0 || -z $line || ${line#passed } != "$(awk '{ print $4 " of " $4 }' <<<"$line")" ]]; then
        grep -E '^(FAILED|[A-Za-z]*Error)' "$out/python/checks.log" | head -20 | tee -a "$LOG"
        fail "python device checks"
    fi
}

# Run this script's `run` on `steps` into OUT/NAME under a wall-clock limit.
within() {
    local pack=$1 out=$2 name=$3 limit=$4 status start=$SECONDS
    shift 4
    log "$name: steps $*, limit ${limit} s, into $out/$name"
    timeout --signal=TERM --kill-after=10 "$limit" "$RUN_SELF" run "$pack" "$out/$name" "$@"
    status=$?
    log "$name: exit $status after $((SECONDS - start)) s (limit $limit s)"
    if [[ $status -eq 124 || $status -eq 137 ]]; then
        fail "$name: over its limit of $limit s"
    elif [[ $status -ne 0 ]]; then
        fail "$name: see $out/$name/SUMMARY.md"
    fi
}

step_correctness() {
    ORDO_GPU_SANITIZE=1 within "$1" "$2" correctness "$CORRECTNESS_LIMIT_S" tests sanitize
}

step_measures() {
    within "$1" "$2" measures "$MEASURES_LIMIT_S" bench roofline train
}

step_device-python() {
    within "$1" "$2" device-python "$PYTHON_LIMIT_S" python
}

run() {
    local pack=${1:-gpu-pack} out=${2:-gpu-results}
    shift $(($# < 2 ? $# : 2))
    local steps=${*:-$ALL_STEPS} s
    for s in $steps; do
        [[ " $ALL_STEPS $WINDOW_STEPS " == *" $s "* ]] ||
            die "unknown step '$s' (steps: $ALL_STEPS $WINDOW_STEPS)"
    done
    local sanitize=${ORDO_GPU_SANITIZE:-0}
    if [[ $sanitize != 1 ]]; then
        [[ " $steps " == *" sanitize "* && $# -gt 0 ]] && die "step sanitize needs ORDO_GPU_SANITIZE=1"
        steps=${steps/sanitize/}
    fi
    mkdir -p "$out"
    LOG=$out/run.log
    : >"$LOG"

    step "1. the pack ($pack)"
    check_pack "$pack"
    {
        echo "host $(hostname), $(date -u +%Y-%m-%dT%H:%M:%SZ)"
        lscpu 2>/dev/null | grep -E '^(Model name|CPU\(s\)):'
        echo "load: $(uptime)"
    } | tee "$out/machine.txt" | tee -a "$LOG"

    step "2. GPU prerequisites (driver, NVRTC$([[ $sanitize == 1 ]] && echo ', compute-sanitizer'))"
    check_machine "$out" "$sanitize" || finish "$out"

    step "3. gpu_bench --check: open the device, compile and load every kernel module"
    "$pack/bin/gpu_bench" --check 2>&1 | tee "$out/check.txt" | tee -a "$LOG"
    [[ ${PIPESTATUS[0]} -eq 0 ]] || { fail "gpu_bench --check"; finish "$out"; }

    local n=4
    for s in $steps; do
        step "$n. $s"
        "step_$s" "$pack" "$out"
        n=$((n + 1))
    done
    finish "$out"
}

finish() {
    local out=$1
    {
        echo "# GPU run $(date -u +%Y-%m-%dT%H:%M:%SZ)"
        echo
        cat "$out/machine.txt" 2>/dev/null
        [[ -f $out/gpu.csv ]] && { echo; cat "$out/gpu.csv"; }
        for f in tests.md train.md; do
            [[ -f $out/$f ]] && { echo; cat "$out/$f"; }
        done
        echo
        if [[ ${#FAILED[@]} -eq 0 ]]; then
            echo "PASSED: every step that ran"
        else
            printf 'FAILED: %s\n' "${FAILED[@]}"
        fi
    } >"$out/SUMMARY.md"
    if [[ ${#FAILED[@]} -gt 0 ]]; then
        log ""
        log "run-gpu-checks: ${#FAILED[@]} failed (${FAILED[*]}); see $out/"
        exit 1
    fi
    log ""
    log "run-gpu-checks: passed; results in $out/"
    exit 0
}

# Sourced (by gpu/tests/run_gpu_checks.rs, to check the counting): define the functions only.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    cd "$(dirname "$0")/.." || exit 1
    case ${1:-} in
    pack) pack "${2:-}" ;;
    run)
        shift
        run "$@"
        ;;
    *) die "usage: $0 pack [PACK] | run [PACK [OUT [STEP...]]]  (steps: $ALL_STEPS)" ;;
    esac
fi
