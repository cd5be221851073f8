#!/bin/bash
# The debug directory (docs/debugging.md, "The debug directory"): for a golden graph, every
# stage file is written, the generated code is the same as without the debug directory, and each
# standalone kernel repro of repro_model.coil (a packed constant weight, an intermediate in the
# arena, two kernels) builds with g++ alone and reproduces coil's outputs of a real call, fails
# when a saved output is changed, and times generated inputs when nothing is saved.
#   test_debug_dir.sh COIL_BINARY WORK_DIR
set -euo pipefail
coil="$1"
work="$2"
here="$(cd "$(dirname "$0")" && pwd)"
golden="$here/../golden/data"
rm -rf "$work" && mkdir -p "$work"
export COIL_CACHE_DIR="$work/cache"
fail() { echo "test_debug_dir: FAIL: $*" >&2; exit 1; }

# 1. The stages of the softmax golden graph, and the same code as a plain compile.
"$coil" compile "$golden/softmax.coil" -o "$work/plain" > /dev/null
"$coil" compile "$golden/softmax.coil" -o "$work/out" --debug-dir "$work/debug" > /dev/null
dirs=("$work"/debug/graph-*)
[ "${#dirs[@]}" -eq 1 ] || fail "want one graph folder, got ${dirs[*]}"
d="${dirs[0]}"
for f in 00-input.coil 01-recognize_attention.coil 02-decompose_and_bind.coil 03-lower.ir \
         04-simplify_indices.ir 05-elide_store_rounding.ir 06-fuse_expand_depthwise.ir \
         07-convs_as_matmuls.ir 08-fold_conv_activations.ir 09-keep_conv_layouts.ir \
         10-autotune_matmuls.ir 11-fuse.schedule 12-plan_memory.schedule \
         fusion.txt plan.txt module.cpp compile_command.txt report.json \
         kernels/cpp_fused_softmax_0/kernel.cpp kernels/cpp_fused_softmax_0/run.sh; do
  [ -s "$d/$f" ] || fail "$f is missing or empty"
done
cmp -s "$d/module.cpp" "$work/plain/module.cpp" || fail "module.cpp differs from a plain compile"
cmp -s "$d/module.cpp" "$work/out/module.cpp" || fail "module.cpp differs from -o's"
# The input stage is the model as coil reads it: it parses and compiles to the same code.
"$coil" compile "$d/00-input.coil" -o "$work/again" > /dev/null
cmp -s "$work/again/module.cpp" "$work/plain/module.cpp" || fail "00-input.coil compiles differently"
grep -q "outer-loop fusion" "$d/fusion.txt" || fail "fusion.txt lacks the fusion decisions"
grep -q "^g++\|^.*/g++\|clang" "$d/compile_command.txt" || fail "compile_command.txt: $(cat "$d/compile_command.txt")"
grep -q '"cpp_fused_softmax_0"' "$d/report.json" || fail "report.json lacks the kernel"

# 2. Kernel repros with the values of a real call: the matmul as coil's template (its packed
# weight) and as a oneDNN call (an extern kernel, linked with libcoil_extern).
for impl in template dnnl; do
  COIL_MATMUL=$impl "$coil" check "$here/repro_model.coil" --debug-dir "$work/repro-$impl" \
    --save-kernel-values > "$work/check.log" 2>&1 || { cat "$work/check.log"; fail "coil check failed"; }
  n=0
  for k in "$work"/repro-$impl/graph-*/kernels/*/; do
    n=$((n + 1))
    name="$impl: $(basename "$k")"
    out=$("$k/run.sh" 2>&1) || { echo "$out"; fail "$name: run.sh exited $?"; }
    echo "$out" | grep -q "matches the saved output" || { echo "$out"; fail "$name checked nothing"; }
    echo "$out" | grep -q "GB/s" || fail "$name printed no time"
    # A changed saved output is a mismatch (exit 1).
    exp=$(ls "$k"/data/*.expected.bin | head -1)
    cp "$exp" "$work/saved.bin"
    printf '\x00\x00\xc0\x7f' | dd of="$exp" bs=1 seek=4 conv=notrunc status=none  # a NaN
    if out=$("$k/run.sh" --iters 1 2>&1); then echo "$out"; fail "$name: a changed output passed"; fi
    echo "$out" | grep -q MISMATCH || fail "$name: no MISMATCH line: $out"
    cp "$work/saved.bin" "$exp"
    # Without saved values: generated inputs, timed, nothing checked.
    out=$("$k/run.sh" --data "$work/none" --iters 3 2>&1) || fail "$name: generated run failed: $out"
    echo "$out" | grep -q "nothing checked" || fail "$name: $out"
  done
  [ "$n" -eq 2 ] || fail "$impl: want 2 kernel repros of repro_model.coil, got $n"
done
grep -q "packed_ptr0" "$work"/repro-template/graph-*/kernels/cpp_template_matmul_0/kernel.cpp ||
  fail "the matmul repro lost its packed weight"
ls "$work"/repro-dnnl/graph-*/kernels/cpp_extern_matmul_0/lib/libcoil_extern.so > /dev/null ||
  fail "the extern kernel's repro lacks libcoil_extern.so"
# The folder is standalone: moved elsewhere, it still builds and passes.
mv "$work"/repro-template/graph-*/kernels/cpp_template_matmul_0 "$work/moved"
"$work/moved/run.sh" --iters 1 > /dev/null || fail "a moved repro does not build or pass"

# 3. --device cuda: the stages, module.py, and a kernel.py per Triton kernel (run on the GPU
# machine: tests/gpu/run_kernel_repros.sh) that is valid Python, carries coil_runtime and
# imports nothing else of coil. A matmul template (its externs detached) and a reduction.
for m in softmax matmul_bias_relu split_sum; do
  "$coil" compile "$golden/../triton/$m.coil" --device cuda -o "$work/cuda-$m" \
    --debug-dir "$work/gpu-$m" > /dev/null
  g=("$work"/gpu-$m/graph-*)
  for f in 00-input.coil 03-lower.ir 06-fuse.schedule module.py report.json; do
    [ -s "${g[0]}/$f" ] || fail "cuda $m: $f is missing or empty"
  done
  kernels=$(sed -n 's/^def \(triton_[a-z0-9_]*\)(.*/\1/p' "${g[0]}/module.py")
  [ -n "$kernels" ] || fail "cuda $m: no kernels in module.py"
  for k in $kernels; do
    py="${g[0]}/kernels/$k/kernel.py"
    [ -s "$py" ] || fail "cuda $m: $k has no kernel.py"
    [ -s "${g[0]}/kernels/$k/coil_runtime/heuristics.py" ] || fail "cuda $m: $k lacks coil_runtime"
    python3 -m py_compile "$py" || fail "cuda $m: $k/kernel.py is not valid Python"
    grep -q "^def $k(" "$py" || fail "cuda $m: $k/kernel.py lacks the kernel"
    if grep -E "^(from|import) coil[^_]" "$py"; then fail "cuda $m: $k/kernel.py imports coil"; fi
  done
done
grep -q "attach_externs()" "$work"/gpu-matmul_bias_relu/graph-*/kernels/triton_tem_*/kernel.py ||
  fail "the template's repro keeps the module's extern choices"
echo "test_debug_dir: ok"
