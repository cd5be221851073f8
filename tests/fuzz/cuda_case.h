// The emit stage of coil_fuzz's Triton mode (tests/fuzz/README.md, "Triton"): the pieces that
// turn fuzz cases into one case directory for tests/fuzz/run_triton.py, which runs it on a GPU.
//
//   DIR/case-000000120/
//     case.json          what the runner reads: inputs, and per graph its outputs (position in
//                        the module's return tuple, dtype, shape, rtol/atol, reference files)
//     graph.coil         the case's graph (with batches: all members merged, fuzz/batch.h)
//     module.py          generate_gpu_module with fusion on
//     module_nofuse.py   the same with fusion off
//     inputs/P.npy       input P of call(), in order
//     ref/P.npy          the reference interpreter's output P
//     wide/P.npy         the widened reference's output P (graphs with f16/bf16 values)
//     module_local.py    the local check's instrumented module (fusion on): the graph with every
//                        node as an output (local_check.h), run only for a graph that differs
//     graphs/K.coil      with batches: each member alone (K: cuda_file_stem of its key) and
//     graphs/K.py        its own modules (K.py, K_nofuse.py, K_local.py), so that a batch whose
//                        call fails can be run member by member without coil on the GPU host
//     local-K/           written by run_triton.py for a graph whose output differs: its node
//                        values (values/ID.npy), read back by coil_fuzz --check-values
//                        (check_values.h)
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "fuzz/evaluate.h"
#include "fuzz/fuzz_case.h"

namespace coil::fuzz {

/// One graph of a case and what the emit stage computed for it.
struct CudaMember {
  std::string key;     // the graph index, or a --graphs-dir file name
  std::string origin;  // the coil_fuzz command that runs it on the CPU
  FuzzCase c;
  std::vector<Tensor> inputs, reference;
  std::optional<std::vector<Tensor>> widened;  // graphs with f16/bf16 values only
  std::string module_on, module_off;           // generated for this graph alone
  // The local check's instrumented module (fusion on; with_every_node_as_output): its call()
  // returns the graph's outputs, then node local_nodes[k] as output outputs + k. Empty, with
  // local_error, when its generation failed (the local check is then inconclusive).
  std::string module_local, local_error;
  std::vector<int> local_nodes;
};

/// generate_gpu_module for `c` (autotune off, fusion on or off) into `source`. Class "" on
/// success, "unsupported" for a documented limit (UnsupportedError, "is not supported", "are
/// not supported yet"), "compile-error" for another coil::Error, "internal" for anything else;
/// config 0 is fusion on, 1 fusion off.
Outcome generate_cuda(const FuzzCase& c, bool fusion, std::string& source);

/// The member's inputs, references and its own modules (fusion on, then off, then the
/// instrumented one, whose failure is not the member's: see module_local). Class "" when it
/// can be emitted; else "rejected" (the interpreter and the code generator both refuse its
/// bound sizes), "unsupported", or a failure as evaluate_case classifies them.
Outcome prepare_member(CudaMember& m);

/// Writes the case directory `dir / name` (atomically: built beside it, then renamed). With
/// more than one member, `merged` is their merge_cases() graph and `module_on`/`module_off` its
/// modules; with one, the member's own modules are the case's.
void write_cuda_case(const std::filesystem::path& dir, const std::string& name,
                     const std::vector<const CudaMember*>& members, const FuzzCase* merged,
                     const std::string& module_on, const std::string& module_off);

/// "000000120" for key "120" (indices padded so that names sort), "NAME" for "NAME.coil" (other
/// characters than letters and digits as '_').
std::string cuda_file_stem(const std::string& key);
/// "case-" + cuda_file_stem(key): the directory of the case whose first graph is `key`.
std::string cuda_case_name(const std::string& key);

}  // namespace coil::fuzz
