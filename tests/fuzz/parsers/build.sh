#!/usr/bin/env bash
# Builds the parser fuzzers with clang 14 (libFuzzer, ASan, UBSan) into build-libfuzzer/, with
# what a run needs beside them (tests/fuzz/README.md, "libFuzzer: the parsers"):
#   text_parser_fuzzer, onnx_parser_fuzzer   the targets (parser_fuzz_tool: corpus helper)
#   lib/          the shared libraries the ONNX target links beyond the C/C++ runtimes
#                 (libonnx, libonnx_proto, libprotobuf, libz), found through its rpath $ORIGIN/lib
#   text.dict, onnx.dict   libFuzzer dictionaries generated from the op registry and ONNX table
#   seeds/text    every .coil file of the repository, the ONNX seeds that import (as to_text
#                 prints them), 400 random graphs of coil_fuzz's generator (when build/bin/coil_fuzz
#                 exists) and attribute lists
#   seeds/onnx    every model.onnx of Debian's libonnx-testdata (when installed)
#
#   tests/fuzz/parsers/build.sh            (COIL_FUZZ_JOBS=N: build jobs, default 2)
#   tests/fuzz/parsers/build.sh --bundle   also packs build-libfuzzer/parser-fuzz-bundle.tar.xz:
#                 the above with run.sh, for a machine without clang (unpack, run ./run.sh)
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
cd "$root"
out="$root/build-libfuzzer"
cxx="${COIL_FUZZ_CXX:-/usr/bin/clang++-14}"
[ -x "$cxx" ] || { echo "build.sh: $cxx not found (apt-get install clang-14)" >&2; exit 2; }
# libFuzzer and the sanitizer runtimes: libclang-rt-14-dev, which clang-14 only recommends.
if ! "$cxx" -print-file-name=libclang_rt.fuzzer-x86_64.a | grep -q /; then
  echo "build.sh: clang's libFuzzer runtime is missing (apt-get install libclang-rt-14-dev)" >&2
  exit 2
fi
bundle=0
[ "${1:-}" = --bundle ] && bundle=1

if [ ! -f "$out/build.ninja" ]; then
  cmake -S tests/fuzz/parsers -B "$out" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" >/dev/null
fi
nice -n 10 cmake --build "$out" -j "${COIL_FUZZ_JOBS:-2}"

# lib/: every library of the ONNX target but the C/C++ runtimes and the loader (the host's own,
# newer ones are compatible: the target machine is Ubuntu 24.04, glibc 2.39, this one 2.36).
rm -rf "$out/lib" && mkdir -p "$out/lib"
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libstdc\+\+|libgcc_s|libpthread|libdl\.so|librt\.so)'
LD_LIBRARY_PATH='' ldd "$out/onnx_parser_fuzzer" | awk '$3 ~ /^\// {print $1, $3}' |
  while read -r name path; do
    echo "$name" | grep -Eq "$skip" || cp -L "$path" "$out/lib/$name"
  done

"$out/parser_fuzz_tool" dict-text > "$out/text.dict"
"$out/parser_fuzz_tool" dict-onnx > "$out/onnx.dict"

rm -rf "$out/seeds" && mkdir -p "$out/seeds/text" "$out/seeds/onnx"
git ls-files '*.coil' | while read -r f; do cp "$f" "$out/seeds/text/repo_${f//\//_}"; done
testdata=/usr/share/libonnx-testdata/data
if [ -d "$testdata" ]; then
  find "$testdata" -name model.onnx | sort | while read -r f; do
    d=$(dirname "$f")
    cp "$f" "$out/seeds/onnx/$(basename "$(dirname "$d")")_$(basename "$d").onnx"
  done
  "$out/parser_fuzz_tool" onnx-to-text "$out/seeds/text" "$out"/seeds/onnx/*.onnx
else
  echo "build.sh: $testdata missing (libonnx-testdata): no ONNX seeds" >&2
fi
if [ -x build/bin/coil_fuzz ]; then
  for i in $(seq 0 399); do
    build/bin/coil_fuzz --seed 5 --index "$i" --print > "$out/seeds/text/gen_$i.coil"
  done
fi
# Attribute lists (parse_attr_text: an input that starts with '{').
printf '{a=1, b=[1, -2], "c d"="s\\x41\\n", e=f32, f=-inf, g=nan, h=true, i=1.5e-3, j=[]}' \
  > "$out/seeds/text/attrs_all_kinds"
printf '{axes=[0, -1], keepdim=false, approximate="tanh", dtype=bf16, eps=1e-05}' \
  > "$out/seeds/text/attrs_ops"
echo "seeds: $(ls "$out/seeds/text" | wc -l) text, $(ls "$out/seeds/onnx" | wc -l) onnx"
echo "libraries the targets need beyond libc, libm, libstdc++ and libgcc_s (in $out/lib):"
ls "$out/lib"

if [ "$bundle" = 1 ]; then
  stage=$(mktemp -d /tmp/parser-fuzz-bundle-XXXXXX)
  trap 'rm -rf "$stage"' EXIT
  mkdir -p "$stage/parser-fuzz"
  cp -r "$out/text_parser_fuzzer" "$out/onnx_parser_fuzzer" "$out/lib" "$out/seeds" \
    "$out/text.dict" "$out/onnx.dict" tests/fuzz/parsers/run.sh "$stage/parser-fuzz/"
  rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  [ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] || rev="$rev+uncommitted"
  echo "$rev" > "$stage/parser-fuzz/REVISION"
  tar cf - -C "$stage" parser-fuzz | xz -T2 -6 > "$out/parser-fuzz-bundle.tar.xz"
  du -h "$out/parser-fuzz-bundle.tar.xz"
fi
