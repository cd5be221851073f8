// Sample nodes of every registry op, for the attribute tests (attr_errors_test.cpp,
// attr_decl_test.cpp): each op's first sample gives its required attributes, and together the
// samples set every declared attribute and leave out every optional one.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "graph/op_registry.h"

namespace coil::testing {

/// The values the samples read: x f32[4, 3], m bool[4, 1, 3], k i32[4, 3], b f32[2, 3, 3],
/// q f32[3, 3], c f32[1, 3, 5, 5] (an image), cw f32[4, 3, 3, 3], cb f32[4], w f32[3], gi
/// (constant in-range indices), index_add's sources ur f32[2, 3] and uc f32[4, 2], and
/// attention's aq f32[1, 2, 3, 4], ak f32[1, 1, 5, 4], am bool[3, 5] (and al f32[1, 2, 3], a
/// logsumexp of aq's rows).
inline const char* kSampleHeader =
    "input x: f32[4, 3]\ninput m: bool[4, 1, 3]\ninput k: i32[4, 3]\ninput b: f32[2, 3, 3]\n"
    "input q: f32[3, 3]\ninput c: f32[1, 3, 5, 5]\ninput cw: f32[4, 3, 3, 3]\ninput cb: f32[4]\n"
    "input aq: f32[1, 2, 3, 4]\ninput ak: f32[1, 1, 5, 4]\ninput am: bool[3, 5]\n"
    "input al: f32[1, 2, 3]\n"
    "input ur: f32[2, 3]\ninput uc: f32[4, 2]\n"
    "const w: f32[3] = [0.5, -1.0, 2.0]\nconst gi: i64[2] = [0, 2]\n";

/// Right-hand sides of `r = ...` for ops that take attributes or particular inputs; the other
/// elementwise ops get op_samples' generic `op(x)` / `op(x, w)`.
inline const std::map<std::string, std::vector<std::string>> kSpecialSamples = {
    {"full", {"full() {shape=[2, 3], value=0.5, dtype=f64}", "full() {shape=[2], value=3}"}},
    {"iota", {"iota() {size=5, start=2, step=3, dtype=i32}", "iota() {size=4}"}},
    {"gelu", {"gelu(x)", "gelu(x) {approximate=\"tanh\"}"}},
    {"cast", {"cast(x) {dtype=i32}"}},
    {"clamp", {"clamp(x) {min=-0.5, max=0.5}", "clamp(k) {min=1}", "clamp(x) {max=1}"}},
    {"logical_not", {"logical_not(m)"}},
    {"logical_and", {"logical_and(m, m)"}},
    {"logical_or", {"logical_or(m, m)"}},
    {"where", {"where(m, x, w)"}},
    {"reshape", {"reshape(x) {shape=[3, -1]}"}},
    {"permute", {"permute(x) {dims=[1, 0]}"}},
    {"transpose", {"transpose(x) {dim0=-1, dim1=0}", "transpose(x)"}},
    {"expand", {"expand(m) {shape=[5, 4, 2, 3]}"}},
    {"slice", {"slice(x) {dim=1, start=1, end=-1, step=2}", "slice(x)"}},
    {"squeeze", {"squeeze(m) {dims=[1]}", "squeeze(m)"}},
    {"unsqueeze", {"unsqueeze(x) {dim=-1}"}},
    {"flatten", {"flatten(b) {start_dim=1, end_dim=2}", "flatten(b)"}},
    {"concat", {"concat(x, x) {dim=1}", "concat(x, x)"}},
    {"gather", {"gather(x, gi) {axis=1}", "gather(x, gi)"}},
    {"index_add", {"index_add(x, gi, uc) {axis=1}", "index_add(x, gi, ur)"}},
    {"sum", {"sum(x) {axes=[0], keepdim=true}", "sum(x) {axis=1}", "sum(x)"}},
    {"prod", {"prod(k) {axes=[1], keepdim=true}", "prod(k) {axis=0}", "prod(k)"}},
    {"max", {"max(x) {axes=[0], keepdim=true}", "max(x) {axis=1}", "max(x)"}},
    {"min", {"min(x) {axes=[0], keepdim=true}", "min(x) {axis=1}", "min(x)"}},
    {"mean", {"mean(x) {axes=[1], keepdim=true}", "mean(x) {axis=0}", "mean(x)"}},
    {"var", {"var(x) {axes=[1], keepdim=true, correction=0}", "var(x) {axis=0}", "var(x)"}},
    {"argmax", {"argmax(x) {axis=1, keepdim=true}", "argmax(x)", "argmax(x) {keepdim=true}"}},
    {"argmin", {"argmin(x) {axis=0, keepdim=true}", "argmin(x)", "argmin(x) {keepdim=true}"}},
    {"softmax", {"softmax(x) {axis=0}", "softmax(x)"}},
    {"log_softmax", {"log_softmax(x) {axis=0}", "log_softmax(x)"}},
    {"layer_norm", {"layer_norm(x, w, w) {dims=1, eps=1e-3}", "layer_norm(b)"}},
    {"rms_norm", {"rms_norm(x, w) {dims=1, eps=1e-3}", "rms_norm(b)"}},
    {"matmul", {"matmul(x, q)"}},
    {"bmm", {"bmm(b, b)"}},
    {"linear", {"linear(x, q, w)"}},
    {"addmm", {"addmm(w, x, q) {alpha=0.5, beta=2.0}", "addmm(w, x, q)"}},
    {"conv2d",
     {"conv2d(c, cw, cb) {stride=[2, 1], padding=1, dilation=[1, 1], groups=1}", "conv2d(c, cw)"}},
    {"max_pool2d",
     {"max_pool2d(c) {kernel=[3, 2], stride=[2, 2], padding=[1, 1], dilation=[1, 2], "
      "ceil_mode=true}",
      "max_pool2d(c) {kernel=2}"}},
    {"avg_pool2d",
     {"avg_pool2d(c) {kernel=3, stride=1, padding=1, ceil_mode=true, count_include_pad=false}",
      "avg_pool2d(c) {kernel=[2, 2]}"}},
    {"global_avg_pool2d", {"global_avg_pool2d(c)"}},
    {"attention", {"attention(aq, ak, ak) {causal=true, scale=0.5}", "attention(aq, ak, ak, am)"}},
    {"attention_lse",
     {"attention_lse(aq, ak) {causal=true, scale=0.5}", "attention_lse(aq, ak, am)"}},
    {"attention_grad",
     {"attention_grad(aq, ak, ak, aq, aq, al) {wrt=\"q\"}",
      "attention_grad(aq, ak, ak, aq, aq, al, am) {wrt=\"k\", causal=true, scale=0.5}"}},
};

/// The samples of `op` (empty for input and constant, which are not nodes of add_node).
inline std::vector<std::string> op_samples(const OpDef& op) {
  std::string name(op.name);
  if (name == "input" || name == "constant") return {};
  auto it = kSpecialSamples.find(name);
  if (it != kSpecialSamples.end()) return it->second;
  if (op.kind == OpKind::Elementwise && op.min_inputs == 1) return {name + "(x)"};
  if (op.kind == OpKind::Elementwise && op.min_inputs == 2) return {name + "(x, w)"};
  return {};
}

/// A graph of the sample header and `r = sample`, with r its output.
inline std::string sample_graph(const std::string& sample) {
  return std::string(kSampleHeader) + "r = " + sample + "\noutput r\n";
}

}  // namespace coil::testing
