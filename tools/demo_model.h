// The built-in model of `coil demo`: a pre-norm transformer encoder block (GPT-style) with
// every lowering path in it: layer norms (reductions fused with their prologue/epilogue),
// five matmuls through the template with fused epilogues (bias, GELU, residual), attention
// heads as views read in place by the batched products, and a softmax.
#pragma once

namespace coil::cli {

inline constexpr const char* kDemoDescription =
    "transformer encoder block: x f32[2, 128, 256], 4 heads of 64, MLP 1024 "
    "(layer_norm, qkv projection, softmax(q k^T / 8) v, output projection, GELU MLP, residuals)";

inline constexpr const char* kDemoModel = R"(# coil demo model: a pre-norm transformer encoder block
# Weights are inputs; `coil demo` fills w_* with U(-1/sqrt(fan_in), 1/sqrt(fan_in)) as torch's
# nn.Linear does, the rest with U(-2, 2).
input x: f32[2, 128, 256]
input ln1_w: f32[256]
input ln1_b: f32[256]
input w_qkv: f32[256, 768]
input b_qkv: f32[768]
input w_o: f32[256, 256]
input b_o: f32[256]
input ln2_w: f32[256]
input ln2_b: f32[256]
input w_1: f32[256, 1024]
input b_1: f32[1024]
input w_2: f32[1024, 256]
input b_2: f32[256]
h = layer_norm(x, ln1_w, ln1_b)
qkv_mm = matmul(h, w_qkv)
qkv = add(qkv_mm, b_qkv)
heads = reshape(qkv) {shape=[2, 128, 3, 4, 64]}
qkv_t = permute(heads) {dims=[2, 0, 3, 1, 4]}
q5 = slice(qkv_t) {dim=0, start=0, end=1}
k5 = slice(qkv_t) {dim=0, start=1, end=2}
v5 = slice(qkv_t) {dim=0, start=2, end=3}
q = squeeze(q5) {dims=[0]}
k = squeeze(k5) {dims=[0]}
v = squeeze(v5) {dims=[0]}
kt = transpose(k) {dim0=2, dim1=3}
scores = matmul(q, kt)
scale = full() {shape=[], value=0.125}
scaled = mul(scores, scale)
p = softmax(scaled) {axis=-1}
ctx = matmul(p, v)
ctx_t = permute(ctx) {dims=[0, 2, 1, 3]}
ctx_m = reshape(ctx_t) {shape=[2, 128, 256]}
attn_mm = matmul(ctx_m, w_o)
attn = add(attn_mm, b_o)
x1 = add(x, attn)
h2 = layer_norm(x1, ln2_w, ln2_b)
f1_mm = matmul(h2, w_1)
f1_b = add(f1_mm, b_1)
f1 = gelu(f1_b)
f2_mm = matmul(f1, w_2)
f2 = add(f2_mm, b_2)
y = add(x1, f2)
output y
)";

}  // namespace coil::cli
