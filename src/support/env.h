// The COIL_* environment variables, declared once in COIL_ENV_VARS with a line of doc each.
// coil reads them only through env() below, README.md's tables list exactly these (a unit test
// checks both ways), and warn_unknown_env_vars() names any other COIL_* variable that is set,
// since a misspelt one (COIL_LGOS=ir) would otherwise be ignored without a word.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace coil {

/// Who reads a variable: coil itself (the library and the CLI), the Python runtime of
/// --device cuda modules (python/coil_runtime), or the build, test and benchmark scripts.
enum class EnvScope { coil, python, scripts };

// X(id, name, scope, doc)
#define COIL_ENV_VARS(X)                                                                           \
  X(logs, "COIL_LOGS", coil, "comma-separated log channels printed to stderr, or all")             \
  X(cache_dir, "COIL_CACHE_DIR", coil, "the code cache directory")                                 \
  X(num_threads, "COIL_NUM_THREADS", coil, "OpenMP threads for kernels")                           \
  X(remote_cache, "COIL_REMOTE_CACHE", coil, "redis://HOST:PORT[/DB]: a cache shared by machines") \
  X(remote_cache_key, "COIL_REMOTE_CACHE_KEY", coil, "the secret that signs remote cache entries") \
  X(remote_cache_key_file, "COIL_REMOTE_CACHE_KEY_FILE", coil, "a file holding that secret")       \
  X(remote_cache_max_mb, "COIL_REMOTE_CACHE_MAX_MB", coil, "largest remote entry (default 256)")   \
  X(remote_cache_timeout_ms, "COIL_REMOTE_CACHE_TIMEOUT_MS", coil,                                 \
    "Redis connect and command timeout (default 5000)")                                            \
  X(remote_cache_wait_s, "COIL_REMOTE_CACHE_WAIT_S", coil,                                         \
    "how long to wait for another machine's compile (default 600)")                                \
  X(cpu_isa, "COIL_CPU_ISA", coil,                                                                 \
    "vector ISA of generated kernels: avx512_amx, avx512, avx2, scalar")                           \
  X(vmath_dir, "COIL_VMATH_DIR", coil, "directory of libcoil_vmath.so and libcoil_extern.so")      \
  X(compile_debug, "COIL_COMPILE_DEBUG", coil, "1: build kernels with -O0 -g")                     \
  X(compile_threads, "COIL_COMPILE_THREADS", coil,                                                 \
    "threads that compile a module's translation units (CPU) or Triton configs (GPU)")             \
  X(matmul, "COIL_MATMUL", coil, "matmul implementation: auto, template, dnnl, openblas")          \
  X(verify_ir, "COIL_VERIFY_IR", coil,                                                             \
    "1: verify the IR after every pass (debug builds: default)")                                   \
  X(testing_amx_emulate, "COIL_TESTING_AMX_EMULATE", coil,                                         \
    "testing only: 1 builds avx512 modules' bf16 matmuls on emulated AMX tiles")                   \
  X(testing_inject_bug, "COIL_TESTING_INJECT_BUG", coil,                                           \
    "testing only: relu, relu_compile_error or relu_crash breaks generated relu")                  \
  X(debug_dir, "COIL_DEBUG_DIR", coil, "write every compile's stages and kernel repros here")      \
  X(size_guards, "COIL_SIZE_GUARDS", coil,                                                         \
    "off: size-generic models run the front half per new size (no explicit guards)")               \
  X(python, "COIL_PYTHON", coil, "the Python that --device cuda runs modules with")                \
  X(cublas, "COIL_CUBLAS", coil, "the libcublas.so a GPU export's matmuls load (a path)")          \
  X(cudnn, "COIL_CUDNN", coil, "the libcudnn.so a GPU export's convolutions load (a path)")        \
  X(pythonpath, "COIL_PYTHONPATH", coil, "coil's python/ directory for --device cuda runs")        \
  X(triton_autotune, "COIL_TRITON_AUTOTUNE", python, "overrides the autotune mode: 1, max or 0")   \
  X(precompile, "COIL_PRECOMPILE", python, "0: compile Triton kernels at their first call")        \
  X(compile_pool, "COIL_COMPILE_POOL", python, "Triton config compiles: auto, process, thread")    \
  X(triton_launcher, "COIL_TRITON_LAUNCHER", python, "how modules launch kernels: direct, jit")    \
  X(poison_outputs, "COIL_POISON_OUTPUTS", python, "1: fill new buffers with NaN")                 \
  X(sync_index_checks, "COIL_SYNC_INDEX_CHECKS", python, "1: raise a CUDA module's bad index")     \
  X(library, "COIL_LIBRARY", python, "the libcoil_c.so (or its directory) python/coil loads")      \
  X(skip_apt, "COIL_SKIP_APT", scripts, "1: scripts/setup.sh installs no packages")                \
  X(build_dir, "COIL_BUILD_DIR", scripts, "the CMake build directory of the scripts")              \
  X(build_type, "COIL_BUILD_TYPE", scripts, "the CMake build type of scripts/setup.sh")            \
  X(slow_tests, "COIL_SLOW_TESTS", scripts, "1: scripts/test.sh also runs tests labeled slow")     \
  X(update_golden, "COIL_UPDATE_GOLDEN", scripts, "set: the golden tests rewrite their files")     \
  X(sym_fuzz_seeds, "COIL_SYM_FUZZ_SEEDS", scripts, "seeds the index-simplifier fuzzer runs")      \
  X(onnx_testdata, "COIL_ONNX_TESTDATA", scripts, "the ONNX backend test data directory")          \
  X(conformance_filter, "COIL_CONFORMANCE_FILTER", scripts, "a substring the ONNX report runs")    \
  X(conformance_out, "COIL_CONFORMANCE_OUT", scripts, "where the ONNX report writes passes")       \
  X(conformance_results, "COIL_CONFORMANCE_RESULTS", scripts, "the ONNX report's per-test file")   \
  X(conformance_atol, "COIL_CONFORMANCE_ATOL", scripts, "the ONNX report's absolute tolerance")    \
  X(rebuild, "COIL_REBUILD", scripts, "0: tests/gpu/prepare.sh uses build/bin/coil as it is")      \
  X(gpu_generated, "COIL_GPU_GENERATED", scripts, "the modules tests/gpu/test_ops.py runs")        \
  X(eager_bench_own_cache, "COIL_EAGER_BENCH_OWN_CACHE", scripts, "set by bench/eager_bench.py")   \
  X(eager_bench_reexec, "COIL_EAGER_BENCH_REEXEC", scripts, "set by bench/eager_bench.py")

enum class EnvVar {
#define COIL_ENV_ENUM(id, name, scope, doc) id,
  COIL_ENV_VARS(COIL_ENV_ENUM)
#undef COIL_ENV_ENUM
};

struct EnvVarInfo {
  EnvVar id;
  std::string_view name;  // "COIL_LOGS"
  EnvScope scope;
  std::string_view doc;
};

/// Every variable of COIL_ENV_VARS, in its order.
std::span<const EnvVarInfo> known_env_vars();

/// The variable's name, "COIL_LOGS".
std::string_view env_name(EnvVar v);

/// The variable's value; "" when it is unset (coil treats set-but-empty as unset).
std::string env(EnvVar v);

/// The warning for the COIL_* names among `set_names` that COIL_ENV_VARS lacks, each with the
/// known name nearest to it; "" when they are all known.
std::string unknown_env_vars_message(const std::vector<std::string>& set_names);

/// Prints unknown_env_vars_message() of the process environment as a warning, once per process
/// (the CLI calls it at startup, compile() and generate_gpu_module() on their first call).
void warn_unknown_env_vars();

}  // namespace coil
