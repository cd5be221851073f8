// The local check: is an output that differs from the reference a bug, or rounding that the
// graph amplified?
//
// A random graph can be ill-conditioned where no kernel is wrong: floor() of a gelu lands on the
// other side of an integer, layer_norm of a nearly constant row divides f32 rounding by
// sqrt(eps), cos() of a large bf16 value turns one rounding of its input into a different
// result. Comparing outputs alone cannot tell those from a miscompiled kernel. The local check
// compiles the graph again with every node as an output, and compares each node with the
// reference interpreter applied to the *compiled* values of its operands, within the node's
// dtype tolerance widened by a bound of the rounding error of its own accumulation (a sum of K
// terms: K * u * max|term|; a norm: that divided by the row's sqrt(var + eps)). A kernel that
// computes the wrong thing differs locally, on identical inputs; amplified rounding does not.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "coil/coil.h"
#include "fuzz/fuzz_case.h"

namespace coil::fuzz {

struct LocalVerdict {
  enum Kind {
    kExplained,     // every node matches the reference on its compiled operands
    kNodeDiffers,   // `node` differs on its compiled operands: a bug in its kernel
    kInconclusive,  // the instrumented compile failed, or a node could not run alone
    // With every node as an output the difference is gone: every intermediate is stored, so an
    // f16/bf16 one is rounded where the reference rounds it; fused, the same kernels kept it
    // in f32 (docs/numerics.md: a fused chain rounds once). Inconclusive by itself.
    kGoneWhenStored,
  };
  Kind kind = kInconclusive;
  int node = -1;
  std::string message;
};

/// Checks every node of `g` given the value of every node (`values[id]`, as the compiled model
/// computed it; inputs as given). Pure: the unit tests feed it values directly.
LocalVerdict check_nodes(const Graph& g, const std::vector<Tensor>& values);

/// `c` with every node that is not an input added as an output (named local_ID), after its own
/// outputs: the graph the local check compiles (check_locally here, the instrumented module of
/// the Triton mode: cuda_case.h). `added` gets the added outputs' node ids, in order.
FuzzCase with_every_node_as_output(const FuzzCase& c, std::vector<int>& added);

/// Compiles `c` with every node as an output under `options`, runs it on `inputs`, and checks
/// each node (check_nodes). `still_differs` says whether the instrumented run's value of the
/// original output still differs from the reference (otherwise the verdict is inconclusive:
/// making every node an output changed what was compiled).
LocalVerdict check_locally(const FuzzCase& c, const CompileOptions& options,
                           const std::vector<Tensor>& inputs, size_t output,
                           const std::function<bool(const Tensor&)>& still_differs);

/// The extra absolute tolerance of node `n` (one value per element of its output, or one for
/// all) for the rounding of its own computation on the given operands.
std::vector<double> rounding_bound(const Node& n, const std::vector<const Tensor*>& operands,
                                   const Tensor& result);

}  // namespace coil::fuzz
