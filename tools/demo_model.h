// The built-in model of `coil demo`: a normalization + activation + attention-style softmax
// block with a residual, exercising every lowering path (elementwise chains, views,
// reductions, composites). It becomes a transformer encoder block once matmul lands.
#pragma once

namespace coil::cli {

inline constexpr const char* kDemoDescription =
    "layer_norm -> gelu(tanh) -> softmax -> residual add -> row sums, on x: f32[512, 1024]";

inline constexpr const char* kDemoModel = R"(# coil demo model
input x: f32[512, 1024]
input w: f32[1024]
input b: f32[1024]
ln = layer_norm(x, w, b) {dims=1, eps=1e-05}
act = gelu(ln) {approximate="tanh"}
p = softmax(act) {axis=-1}
y = add(p, x)
s = sum(y) {axes=[1], keepdim=true}
output y
output s
)";

}  // namespace coil::cli
