// ModelRunner: a loaded CPU module and what its calls need, shared by the compiler's
// CompiledModel (driver/compiled_model.cpp) and the runtime's ExportedModel (coil/runtime.h,
// runtime/exported_model.cpp), which differ only in where the module and its weights come
// from (a compile, or an exported directory).
//
// A call checks its inputs against the model's specs, copies strided ones, takes an arena
// (the buffer of intermediates) from the pool, calls the module's coil_graph_run
// (kernels/coil_module_abi.h) and raises the first failing run-time check of that call. The
// pool lets threads run one model at once: a call finding no free arena allocates one more,
// so a model keeps as many as the most calls at once; packed weights are read only.
//
// The pool may be shared by several runners (ArenaPool): a size-generic model makes one runner
// per size (driver/dynamic_model.cpp), a decode step one per token, and a fresh arena per size
// was memory the kernels first-touched at every call (page faults: the Llama 125M step took
// 35 ms instead of 13 at 2 threads when each call had a new cache length).
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "coil/runtime.h"
#include "kernels/coil_module_abi.h"
#include "runtime/loader.h"
#include "support/run_check.h"

namespace coil {

/// The arenas of one model's runners (see the top of this file). Thread-safe.
class ArenaPool {
 public:
  /// A free arena of at least `bytes`, or a new one. When the free arenas are all smaller, the
  /// largest is dropped and the new one gets 25% headroom over what the pool has served, so
  /// sizes that grow a little per call (a KV cache) reallocate a logarithmic number of times.
  Tensor take(int64_t bytes);
  void give_back(Tensor arena);

 private:
  std::mutex mutex_;
  std::vector<Tensor> free_;
  int64_t largest_ = 0;  // the most bytes any call asked for
};

class ModelRunner {
 public:
  struct Parts {
    std::shared_ptr<SharedLibrary> library;
    std::vector<ValueSpec> inputs, outputs;
    std::vector<RunCheck> run_checks;  // IrProgram::run_checks, by site
    /// One data pointer per constant of the module, kept alive by the owner of the runner.
    std::vector<void*> constants;
    int64_t arena_bytes = 0;
    /// The packed constants, already packed by this module (an exported model's, kept alive by
    /// the owner), or null: the runner packs them with the module's coil_graph_pack.
    const char* packed = nullptr;
    /// A size-generic module's variant (driver/dynamic_model.h): its entry is
    /// coil_graph_run_sized, called with these sizes and arena offsets.
    bool sized = false;
    std::vector<int64_t> sizes, arena_offsets;
    /// Shared with the model's other runners, or null: the runner makes its own (and
    /// allocates its first arena at once).
    std::shared_ptr<ArenaPool> arena_pool;
  };
  explicit ModelRunner(Parts parts);
  ModelRunner(const ModelRunner&) = delete;
  ModelRunner& operator=(const ModelRunner&) = delete;

  /// One call (see the top of this file). `outputs` as CompiledModel::run_into's.
  void run(const std::vector<TensorRef>& inputs, const std::vector<void*>& outputs) const;

  const std::vector<ValueSpec>& inputs() const { return parts_.inputs; }
  const std::vector<ValueSpec>& outputs() const { return parts_.outputs; }
  const std::vector<RunCheck>& run_checks() const { return parts_.run_checks; }
  const SharedLibrary& library() const { return *parts_.library; }
  void* const* constants() const { return parts_.constants.data(); }
  size_t num_constants() const { return parts_.constants.size(); }
  const char* packed() const { return parts_.packed; }
  /// Bytes of the packed region (coil_graph_packed_bytes), 64-byte aligned.
  int64_t packed_bytes() const { return packed_bytes_; }
  int64_t arena_bytes() const { return parts_.arena_bytes; }

  /// One call's arena, taken from the pool and given back when the lease ends.
  class ArenaLease {
   public:
    explicit ArenaLease(const ModelRunner& runner);
    ~ArenaLease();
    ArenaLease(const ArenaLease&) = delete;
    ArenaLease& operator=(const ArenaLease&) = delete;
    char* data() { return static_cast<char*>(arena_.data()); }

   private:
    const ModelRunner& runner_;
    Tensor arena_;
  };

 private:
  Parts parts_;
  GraphRunFn run_ = nullptr;
  GraphRunSizedFn run_sized_ = nullptr;  // a size-generic module's entry instead
  GraphRunErrorFn run_error_ = nullptr;  // modules with run-time checks
  int64_t packed_bytes_ = 0;
  Tensor packed_storage_;  // when the runner packed the constants itself
};

/// Checks `inputs` against `specs` (count, dtype, shape, strides, null data: coil::Error naming
/// the input) and returns a data pointer per input in `ptrs`; a strided input is copied into a
/// contiguous tensor of the returned vector, which the pointers need until the call ends.
std::vector<Tensor> contiguous_inputs(const std::vector<ValueSpec>& specs,
                                      const std::vector<TensorRef>& inputs,
                                      std::vector<const void*>& ptrs);

/// Applies COIL_NUM_THREADS (once per process; set_num_threads and every model's load call it).
void init_threads_from_env();

}  // namespace coil
