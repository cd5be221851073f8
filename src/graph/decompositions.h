// Decompositions: composite graph ops rebuilt from simpler ones before lowering (the
// `decompose` column of the op registry), and the pass that applies them.
#pragma once

#include <map>
#include <string>

#include "coil/graph.h"

namespace coil {

int decompose_softmax(Graph& g, const Node& node, const std::vector<int>& in);
int decompose_log_softmax(Graph& g, const Node& node, const std::vector<int>& in);
int decompose_layer_norm(Graph& g, const Node& node, const std::vector<int>& in);
int decompose_rms_norm(Graph& g, const Node& node, const std::vector<int>& in);
int decompose_mean(Graph& g, const Node& node, const std::vector<int>& in);
int decompose_var(Graph& g, const Node& node, const std::vector<int>& in);
int decompose_linear(Graph& g, const Node& node, const std::vector<int>& in);
int decompose_addmm(Graph& g, const Node& node, const std::vector<int>& in);
int decompose_global_avg_pool2d(Graph& g, const Node& node, const std::vector<int>& in);
int decompose_attention(Graph& g, const Node& node, const std::vector<int>& in);
int decompose_attention_lse(Graph& g, const Node& node, const std::vector<int>& in);
int decompose_attention_grad(Graph& g, const Node& node, const std::vector<int>& in);

struct DecomposeOptions {
  /// Write attention out (matmul, scale, mask, softmax, matmul) instead of keeping the node for
  /// a flash kernel, always. f64 attention is written out on every device (the kernels compute
  /// in f32).
  bool decompose_attention = false;
  /// Write out attention and its backward ops whose head dim (D or Dv) exceeds this (0: no
  /// limit): cuda's Triton flash templates hold a [BLOCK_M, D] tile per operand in registers
  /// and shared memory, up to 256 (triton_attention.h, triton_attention_backward.h).
  int64_t attention_max_head_dim = 0;
  /// Write out attention_lse and attention_grad (attention's backward) whatever the device
  /// (both have kernels: coil_attention.h on the CPU, the Triton backward templates on cuda,
  /// which attention_max_head_dim limits as the forward's).
  bool decompose_attention_backward = false;
  /// A size-generic compile (driver/dynamic_model.h): each size symbol of the graph is renamed
  /// as this map says (to ks0, ks1, ...) and stays symbolic, instead of being bound.
  std::map<std::string, std::string> rename_symbols;
};

/// A copy of `g` in which every composite node is replaced by its decomposition (recursively),
/// and every symbolic size is replaced by its binding in `sizes` (all must be bound, unless
/// options.rename_symbols renames it).
/// Value names of kept nodes are preserved; graph outputs keep their names.
Graph decompose_and_bind(const Graph& g, const std::map<std::string, int64_t>& sizes,
                         const DecomposeOptions& options = {});

}  // namespace coil
