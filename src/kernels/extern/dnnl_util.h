// oneDNN helpers shared by libcoil_extern (extern_kernels.cpp) and the matmul benchmark: errors
// as exceptions, owning handles, and the process's one CPU engine and per-thread streams (which
// live in libcoil_extern, so that every module and the benchmark share them).
#pragma once

#include <dnnl.h>
#include <dnnl_debug.h>

#include <stdexcept>
#include <string>

#include "kernels/coil_extern.h"  // COIL_EXTERN_API

namespace coil {
namespace ext {

[[noreturn]] inline void fail(const std::string& what) {
  throw std::runtime_error("coil extern kernel: " + what);
}

/// Throws when `status` is not dnnl_success: "<context>: <call> failed: oneDNN status <name>".
inline void check_dnnl(dnnl_status_t status, const char* call, const std::string& context) {
  if (status == dnnl_success) return;
  const char* name = dnnl_status2str(status);
  fail(context + ": " + call + " failed: oneDNN status " + (name ? name : "?") + " (" +
       std::to_string(static_cast<int>(status)) + ")");
}

/// The process's oneDNN CPU engine (created on first use, thread-safe; never destroyed, so that
/// no static destructor at exit races oneDNN's own teardown).
COIL_EXTERN_API dnnl_engine_t cpu_engine();
/// This thread's oneDNN stream (a stream is not meant to be shared between threads that execute
/// concurrently), destroyed when the thread exits.
COIL_EXTERN_API dnnl_stream_t thread_stream();

/// Owns one oneDNN C handle.
template <typename T, dnnl_status_t (*Destroy)(T)>
class Handle {
 public:
  Handle() = default;
  ~Handle() { reset(); }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  T get() const { return h_; }
  T* out() {
    reset();
    return &h_;
  }
  void reset() {
    if (h_) Destroy(h_);
    h_ = nullptr;
  }
  explicit operator bool() const { return h_ != nullptr; }

 private:
  T h_ = nullptr;
};
using PrimitiveDesc = Handle<dnnl_primitive_desc_t, dnnl_primitive_desc_destroy>;
using Primitive = Handle<dnnl_primitive_t, dnnl_primitive_destroy>;
using Memory = Handle<dnnl_memory_t, dnnl_memory_destroy>;
using Attr = Handle<dnnl_primitive_attr_t, dnnl_primitive_attr_destroy>;
using PostOps = Handle<dnnl_post_ops_t, dnnl_post_ops_destroy>;

}  // namespace ext
}  // namespace coil
