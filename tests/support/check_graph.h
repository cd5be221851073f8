// Test helpers: compile a graph, run it, and compare every output with the reference
// interpreter (graph/interpreter.h). Failures print the output name and the worst element.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <omp.h>

#include <cstring>
#include <string>
#include <vector>

#include "coil/coil.h"
#include "coil/runtime.h"
#include "graph/interpreter.h"
#include "graph/text_format.h"
#include "runtime/compare.h"
#include "runtime/isa.h"

namespace coil::testing {

/// Random inputs for every graph input (sizes must be static), seeded deterministically.
inline std::vector<Tensor> random_inputs(const Graph& g, uint64_t seed = 1, double lo = -2.0,
                                         double hi = 2.0) {
  std::vector<Tensor> inputs;
  for (int id : g.inputs()) {
    const Node& n = g.node(id);
    auto sizes = static_sizes(n.type.shape);
    EXPECT_TRUE(sizes.has_value()) << "input " << n.name << " has symbolic sizes";
    inputs.push_back(random_tensor(n.type.dtype, *sizes, seed++, lo, hi));
  }
  return inputs;
}

/// Compiles and runs `g` on `inputs` and compares with the reference. `tol_scale` widens the
/// per-dtype default tolerance (for ops like pow whose f32 rounding error grows with the value).
inline ::testing::AssertionResult matches_reference(const Graph& g,
                                                    const std::vector<Tensor>& inputs,
                                                    const CompileOptions& options = {},
                                                    double tol_scale = 1.0) {
  CompiledModel m = compile(g, options);
  std::vector<Tensor> got = m.run(inputs);
  std::vector<Tensor> want = interpret(g, inputs);
  for (size_t i = 0; i < got.size(); ++i) {
    Tolerance tol = default_tolerance(g.node(g.outputs()[i].node).type.dtype);
    tol.rtol *= tol_scale;
    tol.atol *= tol_scale;
    CompareResult c = compare_tensors(got[i], want[i], tol);
    if (!c.ok) {
      return ::testing::AssertionFailure()
             << "output " << g.outputs()[i].name << " (" << g.node(g.outputs()[i].node).op_name()
             << "): " << c.message << "\n--- graph ---\n"
             << to_text(g);
    }
  }
  return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult matches_reference(const Graph& g, uint64_t seed = 1,
                                                    double tol_scale = 1.0) {
  return matches_reference(g, random_inputs(g, seed), {}, tol_scale);
}

/// The ISAs this machine runs of avx512, avx2 and scalar (tests that compare builds).
inline std::vector<std::string> runnable_isas() {
  std::vector<std::string> out;
  for (const char* name : {"avx512", "avx2", "scalar"})
    if (cpu_supports(isa_by_name(name))) out.push_back(name);
  return out;
}

/// Parses a text graph (for concise tests).
inline Graph graph_from_text(const std::string& text) {
  return parse_graph(text, "<test>");
}

/// Whether two tensors of the same dtype hold the same bytes (NaN payloads included).
inline bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.numel() == b.numel() &&
         std::memcmp(a.data(), b.data(), static_cast<size_t>(a.numel() * dtype_size(a.dtype()))) ==
             0;
}

/// Output 0 of `m` on `in` at 1 and at 2 threads (coil::set_num_threads; restored after): for
/// kernels that split their work by the thread count and must still give the same bits.
inline std::vector<Tensor> first_output_at_one_and_two_threads(CompiledModel& m,
                                                               const std::vector<Tensor>& in) {
  const int saved = omp_get_max_threads();
  std::vector<Tensor> got;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    got.push_back(m.run(in)[0].clone());
  }
  set_num_threads(saved);
  return got;
}

}  // namespace coil::testing
