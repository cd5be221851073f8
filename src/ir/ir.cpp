#include "ir/ir.h"

#include <algorithm>

#include <fmt/format.h>

#include "support/check.h"

namespace coil {

std::string_view buffer_kind_name(BufferKind k) {
  switch (k) {
    case BufferKind::Input:
      return "input";
    case BufferKind::Constant:
      return "constant";
    case BufferKind::Intermediate:
      return "intermediate";
    case BufferKind::Output:
      return "output";
  }
  COIL_UNREACHABLE("bad buffer kind");
}

sym::Expr Layout::offset_of(const std::vector<sym::Expr>& index) const {
  COIL_ASSERT(index.size() == strides.size(), "index rank {} vs layout rank {}", index.size(),
              strides.size());
  sym::Expr off = 0;
  for (size_t i = 0; i < index.size(); ++i) off = off + index[i] * strides[i];
  return off;
}

sym::Expr Layout::numel() const {
  sym::Expr n = 1;
  for (const auto& s : sizes) n = n * s;
  return n;
}

Layout contiguous_layout(DType dtype, const Shape& sizes) {
  Layout l;
  l.dtype = dtype;
  l.sizes = sizes;
  l.strides.resize(sizes.size());
  sym::Expr s = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    l.strides[i] = s;
    s = s * sizes[i];
  }
  return l;
}

std::vector<int> ComputedBuffer::reads() const {
  std::vector<int> out;
  for (const BodyOp& op : body.ops()) {
    if (op.op == LoopOp::load && std::find(out.begin(), out.end(), op.buffer) == out.end())
      out.push_back(op.buffer);
  }
  return out;
}

sym::Expr loop_var(int i) {
  return sym::make_symbol(fmt::format("x{}", i));
}
sym::Expr reduction_var(int i) {
  return sym::make_symbol(fmt::format("r{}", i));
}

int IrProgram::add_buffer(BufferKind kind, Layout layout, int external_index) {
  Buffer b;
  b.id = static_cast<int>(buffers.size());
  b.kind = kind;
  b.layout = std::move(layout);
  b.external_index = external_index;
  switch (kind) {
    case BufferKind::Input:
      b.name = fmt::format("arg{}", external_index);
      break;
    case BufferKind::Constant:
      b.name = fmt::format("const{}", external_index);
      break;
    case BufferKind::Output:
      b.name = fmt::format("out{}", external_index);
      break;
    case BufferKind::Intermediate: {
      const int number = std::max(b.id, next_intermediate_name);
      b.name = fmt::format("buf{}", number);
      next_intermediate_name = number + 1;
      break;
    }
  }
  buffers.push_back(std::move(b));
  return buffers.back().id;
}

std::optional<StridedOperand::BlasLayout> StridedOperand::blas_layout(int64_t rows,
                                                                      int64_t cols) const {
  if (cols == 1 || col_stride == 1) {
    int64_t ld = rows == 1 ? std::max<int64_t>(cols, 1) : row_stride;
    if (ld >= std::max<int64_t>(cols, 1)) return BlasLayout{false, ld};
  }
  if (rows == 1 || row_stride == 1) {
    int64_t ld = cols == 1 ? std::max<int64_t>(rows, 1) : col_stride;
    if (ld >= std::max<int64_t>(rows, 1)) return BlasLayout{true, ld};
  }
  return std::nullopt;
}

std::string_view matmul_impl_name(MatmulImpl i) {
  switch (i) {
    case MatmulImpl::Template:
      return "template";
    case MatmulImpl::Dnnl:
      return "dnnl";
    case MatmulImpl::OpenBlas:
      return "openblas";
  }
  return "?";
}

std::string_view loop_kind_name(LoopKind k) {
  switch (k) {
    case LoopKind::Pointwise:
      return "Pointwise";
    case LoopKind::Reduction:
      return "Reduction";
    case LoopKind::Template:
      return "Template";
    case LoopKind::Extern:
      return "Extern";
  }
  return "?";
}

const char* activation_name(Conv2dSpec::Activation a) {
  switch (a) {
    case Conv2dSpec::Activation::silu:
      return "silu";
    case Conv2dSpec::Activation::relu:
      return "relu";
    case Conv2dSpec::Activation::clamp:
      return "clamp";
    case Conv2dSpec::Activation::none:
      break;
  }
  return "none";
}

bool runs_on_coil_depthwise(const Conv2dSpec& c) {
  return c.groups > 1 && c.groups == c.c && c.groups == c.oc;
}

bool runs_on_coil_direct(const Conv2dSpec& c) {
  return c.groups == 1 && c.c >= 1 && c.c <= 4;
}

std::string to_string(const IrProgram& p) {
  std::string out;
  for (const Buffer& b : p.buffers) {
    out += fmt::format("buffer {} ({}): {}{} strides {}\n", b.name, buffer_kind_name(b.kind),
                       dtype_name(b.layout.dtype), shape_str(b.layout.sizes),
                       shape_str(b.layout.strides));
  }
  for (const ComputedBuffer& c : p.computations) {
    out += fmt::format("{} {} ranges {}", loop_kind_name(c.kind), p.buffer(c.buffer).name,
                       shape_str(c.ranges));
    if (c.matmul) {
      const MatmulSpec& m = *c.matmul;
      out += fmt::format(" matmul[{}] batch [{}] m={} n={} k={}", matmul_impl_name(m.impl),
                         fmt::join(m.batch, ", "), m.m, m.n, m.k);
    }
    if (c.conv) {
      out += fmt::format(" conv2d groups={}", c.conv->groups);
      if (c.conv->activation != Conv2dSpec::Activation::none)
        out += fmt::format(" activation={}", activation_name(c.conv->activation));
      if (c.conv->activation == Conv2dSpec::Activation::clamp)
        out += fmt::format("({}, {})", c.conv->clamp_min, c.conv->clamp_max);
      if (c.conv->expand) {
        const Conv2dSpec::Expand& e = *c.conv->expand;
        out += fmt::format(" expand(c={}, w={}", e.c, p.buffer(e.w).name);
        if (e.bias >= 0) out += fmt::format(", bias={}", p.buffer(e.bias).name);
        if (e.activation != Conv2dSpec::Activation::none)
          out += fmt::format(", activation={}", activation_name(e.activation));
        if (e.activation == Conv2dSpec::Activation::clamp)
          out += fmt::format("({}, {})", e.clamp_min, e.clamp_max);
        out += ")";
      }
      if (c.conv->x_nhwc) out += " x=NHWC";
      if (c.conv->y_nhwc) out += " y=NHWC";
    }
    if (c.attention) {
      const AttentionSpec& a = *c.attention;
      constexpr const char* kKernels[] = {"attention", "attention_lse", "attention_grad_q",
                                          "attention_grad_k", "attention_grad_v"};
      out += fmt::format(" {} heads={}/{} q_len={} kv_len={} d={}/{}{}{}",
                         kKernels[static_cast<int>(a.kernel)], a.heads, a.kv_heads, a.q_len,
                         a.kv_len, a.head_dim, a.value_dim, a.causal ? " causal" : "",
                         a.mask >= 0 ? " masked" : "");
    }
    if (c.index_add) {
      const IndexAddSpec& a = *c.index_add;
      out += fmt::format(" index_add outer={} n={} k={} inner={}", a.outer, a.n, a.k, a.inner);
      if (a.x < 0) out += fmt::format(" x=fill({})", a.fill);
    }
    if (c.is_reduction()) out += fmt::format(" reduction_ranges {}", shape_str(c.reduction_ranges));
    out += fmt::format("  # from {}\n", fmt::join(c.origin_names, ", "));
    // Print buffer ids with their names for readability.
    std::string body = to_string(c.body);
    out += body;
  }
  return out;
}

std::vector<std::string> describe_origins(const std::vector<Origin>& origins) {
  // Inlined producers by op, each once: a decomposed layer_norm inlines a dozen temporaries.
  std::vector<std::string> inlined, out;
  for (const Origin& o : origins)
    if (o.inlined && std::find(inlined.begin(), inlined.end(), o.op) == inlined.end())
      inlined.push_back(o.op);
  for (const Origin& o : origins) {
    if (o.inlined) continue;
    out.push_back(inlined.empty()
                      ? fmt::format("{} ({})", o.name, o.op)
                      : fmt::format("{} ({} <- {})", o.name, o.op, fmt::join(inlined, ", ")));
    inlined.clear();  // listed once, with the first node computed
  }
  return out;
}

}  // namespace coil
