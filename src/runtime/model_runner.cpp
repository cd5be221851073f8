#include "runtime/model_runner.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "support/check.h"
#include "support/env.h"
#include "support/log.h"

namespace coil {

void init_threads_from_env() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::string v = env(EnvVar::num_threads);
    if (!v.empty()) {
      int n = std::atoi(v.c_str());
      if (n > 0)
        omp_set_num_threads(n);
      else
        warn(fmt::format("COIL_NUM_THREADS='{}' is not a positive integer; ignored", v));
    }
    // Otherwise OpenMP reads OMP_NUM_THREADS itself.
  });
}

void set_num_threads(int n) {
  init_threads_from_env();
  if (n > 0) omp_set_num_threads(n);
}

std::optional<size_t> find_value(const std::vector<ValueSpec>& specs, std::string_view name) {
  for (size_t i = 0; i < specs.size(); ++i)
    if (specs[i].name == name) return i;
  for (size_t i = 0; i < specs.size(); ++i)
    if (!specs[i].source_name.empty() && specs[i].source_name == name) return i;
  return std::nullopt;
}

std::string value_names(const std::vector<ValueSpec>& specs) {
  std::string out;
  for (const ValueSpec& s : specs) {
    if (!out.empty()) out += ", ";
    out += s.name;
    if (!s.source_name.empty()) out += " (" + s.source_name + ")";
  }
  return out.empty() ? "none" : out;
}

ModelRunner::ModelRunner(Parts parts) : parts_(std::move(parts)) {
  init_threads_from_env();
  const SharedLibrary& lib = *parts_.library;
  if (parts_.sized)
    run_sized_ = lib.symbol_as<GraphRunSizedFn>(kGraphRunSizedSymbol);
  else
    run_ = lib.symbol_as<GraphRunFn>(kGraphRunSymbol);
  // Run-time checks: each run records its first failure itself (cpp_module.cpp), read back on
  // the calling thread right after the run.
  if (!parts_.run_checks.empty()) run_error_ = lib.symbol_as<GraphRunErrorFn>(kGraphRunErrorSymbol);
  packed_bytes_ = lib.symbol_as<GraphPackedBytesFn>(kGraphPackedBytesSymbol)();
  if (parts_.packed == nullptr) {
    // Weights that templates read packed are packed here, once.
    packed_storage_ = Tensor::empty(DType::U8, {std::max<int64_t>(packed_bytes_, 64)});
    lib.symbol_as<GraphPackFn>(kGraphPackSymbol)(parts_.constants.data(),
                                                 static_cast<char*>(packed_storage_.data()));
    parts_.packed = static_cast<const char*>(packed_storage_.data());
  }
  parts_.arena_bytes = std::max<int64_t>(parts_.arena_bytes, 1);
  if (!parts_.arena_pool) {
    // A model of its own: its first arena now, at load, rather than in the first call.
    parts_.arena_pool = std::make_shared<ArenaPool>();
    parts_.arena_pool->give_back(parts_.arena_pool->take(parts_.arena_bytes));
  }
}

Tensor ArenaPool::take(int64_t bytes) {
  Tensor dropped;  // freed after the lock is released
  {
    std::lock_guard<std::mutex> lock(mutex_);
    largest_ = std::max(largest_, bytes);
    for (size_t i = 0; i < free_.size(); ++i) {
      if (free_[i].numel() >= bytes) {
        Tensor t = std::move(free_[i]);
        free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
        return t;
      }
    }
    if (free_.empty()) return Tensor::empty(DType::U8, {bytes});  // all in use: one more
    auto largest =
        std::max_element(free_.begin(), free_.end(),
                         [](const Tensor& a, const Tensor& b) { return a.numel() < b.numel(); });
    dropped = std::move(*largest);
    free_.erase(largest);
    bytes = std::max(bytes, largest_ + largest_ / 4);
  }
  return Tensor::empty(DType::U8, {bytes});
}

void ArenaPool::give_back(Tensor arena) {
  std::lock_guard<std::mutex> lock(mutex_);
  free_.push_back(std::move(arena));
}

ModelRunner::ArenaLease::ArenaLease(const ModelRunner& runner)
    : runner_(runner), arena_(runner.parts_.arena_pool->take(runner.parts_.arena_bytes)) {}

ModelRunner::ArenaLease::~ArenaLease() {
  runner_.parts_.arena_pool->give_back(std::move(arena_));
}

std::vector<Tensor> contiguous_inputs(const std::vector<ValueSpec>& specs,
                                      const std::vector<TensorRef>& inputs,
                                      std::vector<const void*>& ptrs) {
  COIL_USER_CHECK(inputs.size() == specs.size(), "the model takes {} inputs, got {}", specs.size(),
                  inputs.size());
  std::vector<Tensor> copies;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorRef& t = inputs[i];
    const ValueSpec& s = specs[i];
    COIL_USER_CHECK(t.dtype == s.dtype, "input {}: expected dtype {}, got {}", s.name,
                    dtype_name(s.dtype), dtype_name(t.dtype));
    COIL_USER_CHECK(t.shape == s.shape, "input {}: expected shape {}, got {}", s.name,
                    shape_str(s.shape), shape_str(t.shape));
    COIL_USER_CHECK(t.strides.size() == t.shape.size(), "input {}: {} strides for {} dims", s.name,
                    t.strides.size(), t.shape.size());
    COIL_USER_CHECK(t.data != nullptr || t.numel() == 0, "input {}: null data pointer", s.name);
    if (t.is_contiguous()) {
      ptrs.push_back(t.data);
    } else {
      // Kernels are compiled for contiguous inputs: copy a strided input once per call.
      copies.push_back(Tensor::copy_of(t));
      ptrs.push_back(copies.back().data());
    }
  }
  return copies;
}

void ModelRunner::run(const std::vector<TensorRef>& inputs,
                      const std::vector<void*>& outputs) const {
  std::vector<const void*> in_ptrs;
  std::vector<Tensor> keep = contiguous_inputs(parts_.inputs, inputs, in_ptrs);
  COIL_USER_CHECK(outputs.size() == parts_.outputs.size(), "the model has {} outputs, got {}",
                  parts_.outputs.size(), outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i)
    COIL_USER_CHECK(outputs[i] != nullptr || shape_numel(parts_.outputs[i].shape) == 0,
                    "output {}: null data pointer", parts_.outputs[i].name);
  std::vector<void*> out_ptrs = outputs;
  ArenaLease arena(*this);
  if (run_sized_) {
    run_sized_(const_cast<void* const*>(in_ptrs.data()), out_ptrs.data(), parts_.constants.data(),
               arena.data(), parts_.packed, parts_.sizes.data(), parts_.arena_offsets.data());
  } else {
    run_(const_cast<void* const*>(in_ptrs.data()), out_ptrs.data(), parts_.constants.data(),
         arena.data(), parts_.packed);
  }
  if (run_error_) {
    int64_t value = 0, limit = 0;
    int site = run_error_(&value, &limit);
    if (site >= 0)
      user_error("{}",
                 run_check_message(parts_.run_checks.at(static_cast<size_t>(site)), value, limit));
  }
}

}  // namespace coil
