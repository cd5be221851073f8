// Loop IR: buffers with layouts, and the computations that fill them.
//
//   Buffer          memory: a graph input, constant, output, or an intermediate.
//   ComputedBuffer  a buffer plus the loop nest computing it. Its kind is
//                     Pointwise: for x in ranges: store(body(x))
//                     Reduction: for x in ranges: store(reduce_{r in reduction_ranges} body(x, r))
//   IrProgram       all buffers and computations of a graph, in a valid execution order.
//
// Layouts are row-major contiguous for every buffer coil allocates; inputs are made contiguous
// by the runtime before a call (a later issue may specialize on input strides).
#pragma once

#include <string>
#include <vector>

#include "graph/graph.h"
#include "ir/loop_body.h"

namespace coil {

enum class BufferKind { Input, Constant, Intermediate, Output };
std::string_view buffer_kind_name(BufferKind k);

struct Layout {
  DType dtype = DType::F32;
  Shape sizes;
  Shape strides;  // in elements
  /// Linear offset (elements) of the element at `index` (one Expr per dim).
  sym::Expr offset_of(const std::vector<sym::Expr>& index) const;
  sym::Expr numel() const;
};
Layout contiguous_layout(DType dtype, const Shape& sizes);

struct Buffer {
  int id = -1;
  std::string name;  // "arg0", "const0", "buf3", "out0": names coil chose, never user text
  BufferKind kind = BufferKind::Intermediate;
  Layout layout;
  int external_index = -1;  // position among graph inputs / constants / outputs
};

enum class LoopKind { Pointwise, Reduction };

struct ComputedBuffer {
  int buffer = -1;  // the buffer written
  LoopKind kind = LoopKind::Pointwise;
  std::vector<sym::Expr> ranges;            // extents of x0, x1, ...
  std::vector<sym::Expr> reduction_ranges;  // extents of r0, r1, ... (Reduction only)
  LoopBody body;                            // ends with one store
  std::vector<int> origins;                 // graph node ids this computation came from
  std::vector<std::string> origin_names;    // "t3 (add)" for comments in generated code

  bool is_reduction() const { return kind == LoopKind::Reduction; }
  /// Buffers read by the body, in first-use order.
  std::vector<int> reads() const;
};

/// The loop variables: x0.. for pointwise dims and r0.. for reduction dims.
sym::Expr loop_var(int i);
sym::Expr reduction_var(int i);

struct IrProgram {
  std::vector<Buffer> buffers;
  std::vector<ComputedBuffer> computations;              // execution order
  std::vector<int> input_buffers;                        // per graph input
  std::vector<int> constant_buffers;                     // per constant node (see constants)
  std::vector<int> output_buffers;                       // per graph output
  std::vector<std::shared_ptr<const Tensor>> constants;  // data of constant_buffers

  int add_buffer(BufferKind kind, Layout layout, int external_index = -1);
  const Buffer& buffer(int id) const { return buffers[static_cast<size_t>(id)]; }
};

/// Readable dump (COIL_LOGS=ir).
std::string to_string(const IrProgram& p);

}  // namespace coil
