// ONNX Attention (opset 23) onto coil's attention op, and the table of ops whose definitions
// changed after opset 17 (models of opsets 18 to 23 are read with the opset-17 mappings of every
// op that did not change in a way coil would misread).
//
// Attention(Q, K, V, attn_mask?, past_key?, past_value?) -> (Y, present_key?, present_value?,
// qk_matmul_output?): Q [B, H, Tq, D] or [B, Tq, H * D] (q_num_heads), K and V with kv_num_heads
// heads, past_key/past_value [B, Hkv, P, D] concatenated before K and V along the sequence
// (present_key/present_value are the results); a bool mask (true: attend) or an additive one
// broadcasting to [B, H, Tq, P + Tk], shorter along the keys than P + Tk: padded with
// false/-inf; is_causal: query i sees keys j <= i + P (bottom-right aligned when Tq equals the
// new keys' length, top-left without a past and Tq != Tk: coil's `causal` is bottom-right, so
// the other cases pass the triangle as a mask); scale default 1/sqrt(D); softcap
// (softcap * tanh(s / softcap) of the scaled scores, before the mask) and the qk_matmul_output
// output (modes 0: the scaled scores, 3: the softmax) are written out (matmul, softmax, matmul).
#include <cmath>

#include "frontend/onnx/onnx_ops.h"

namespace coil::onnxfe {
namespace {

constexpr int32_t kFloat = 1, kFloat16 = 10, kDouble = 11, kBFloat16 = 16;  // TensorProto

Shape shape_of(const std::vector<int64_t>& s) {
  return Shape(s.begin(), s.end());
}

// [B, S, heads * D] -> [B, heads, S, D]
int split_heads(OnnxNode& n, int x, int64_t heads, const char* what) {
  std::vector<int64_t> s = n.static_shape(x, what);
  if (s[2] % heads != 0)
    n.error("{}'s hidden size {} is not a multiple of its {} heads", what, s[2], heads);
  int r = reshape_to(n, x, shape_of({s[0], s[1], heads, s[2] / heads}));
  return n.add("permute", {r}, Attrs{{"dims", std::vector<int64_t>{0, 2, 1, 3}}});
}

// [B, H, S, Dv] -> [B, S, H * Dv]
int merge_heads(OnnxNode& n, int y) {
  std::vector<int64_t> s = n.static_shape(y, "Y");
  int p = n.add("permute", {y}, Attrs{{"dims", std::vector<int64_t>{0, 2, 1, 3}}});
  return reshape_to(n, p, shape_of({s[0], s[2], s[1] * s[3]}));
}

// [B, Hkv, T, D] -> [B, H, T, D]: head h reads kv head h / (H / Hkv), as ONNX's repeat.
int expand_heads(OnnxNode& n, int x, int64_t heads) {
  std::vector<int64_t> s = n.static_shape(x, "K/V");
  if (s[1] == heads) return x;
  int64_t g = heads / s[1];
  int r = reshape_to(n, x, shape_of({s[0], s[1], 1, s[2], s[3]}));
  r = n.add("expand", {r}, Attrs{{"shape", std::vector<int64_t>{s[0], s[1], g, s[2], s[3]}}});
  return reshape_to(n, r, shape_of({s[0], heads, s[2], s[3]}));
}

// [Tq, Tk] bool: key j visible from query i when j <= i + offset.
int causal_triangle(OnnxNode& n, int64_t tq, int64_t tk, int64_t offset) {
  int rows = iota_along(n, tq, 0, 2);
  if (offset != 0) rows = n.add("add", {rows, n.scalar(static_cast<double>(offset), DType::I64)});
  int cols = iota_along(n, tk, 1, 2);
  return n.add("le", {cols, rows});
}

}  // namespace

void map_attention(OnnxNode& n) {
  // Every attribute is read here: Debian's onnx (1.12) has no schema of Attention, against whose
  // defaults check_unread_attrs could compare an unread one.
  const bool is_causal = n.attr_int("is_causal", 0) != 0;
  const int64_t q_heads_attr = n.attr_int("q_num_heads", 0);
  const int64_t kv_heads_attr = n.attr_int("kv_num_heads", 0);
  const int64_t mode = n.attr_int("qk_matmul_output_mode", 0);
  const double softcap = n.attr_float("softcap", 0.0);
  const int64_t precision = n.attr_int("softmax_precision", 0);
  const bool has_scale = n.has_attr("scale");
  const double scale_attr = n.attr_float("scale", 0.0);

  if (n.opset() < 23)
    n.error("Attention is an op of opset 23 on, and the model imports opset {}", n.opset());
  int q = n.in(0), k = n.in(1), v = n.in(2);
  const DType t = n.dtype(q);
  if (!is_floating(t)) n.error("Q must be floating point, got {}", dtype_name(t));
  if (n.dtype(k) != t || n.dtype(v) != t)
    n.error("Q, K and V must have one dtype, got {}, {}, {}", dtype_name(t), dtype_name(n.dtype(k)),
            dtype_name(n.dtype(v)));
  const int64_t rank = n.rank(q);
  if ((rank != 3 && rank != 4) || n.rank(k) != rank || n.rank(v) != rank)
    n.error(
        "Q, K and V must all be 3-D [B, S, hidden] or all 4-D [B, H, S, D], got ranks {}, {}, "
        "{}",
        rank, n.rank(k), n.rank(v));
  if (n.num_inputs() > 6 && n.has_input(6))
    unsupported("input 6 (nonpad_kv_seqlen, opset 24) is not implemented");
  if (mode < 0 || mode > 3) n.error("attribute 'qk_matmul_output_mode' = {} is not 0 to 3", mode);
  if (softcap < 0) n.error("attribute 'softcap' = {} is negative", softcap);
  if (precision != 0 && precision != kFloat && precision != kFloat16 && precision != kDouble &&
      precision != kBFloat16)
    n.error("attribute 'softmax_precision' = {} is not a floating TensorProto type", precision);
  // coil computes the softmax in f32 (f64 for f64 inputs): as precise as asked or more, except
  // a double softmax of narrower inputs.
  if (precision == kDouble && t != DType::F64)
    unsupported(
        "attribute 'softmax_precision' = 11 (double) is not implemented for {} inputs "
        "(coil's softmax runs in f32)",
        dtype_name(t));

  if (rank == 3) {
    if (q_heads_attr <= 0 || kv_heads_attr <= 0)
      n.error("3-D inputs need attributes q_num_heads and kv_num_heads (got {} and {})",
              q_heads_attr, kv_heads_attr);
    q = split_heads(n, q, q_heads_attr, "Q");
    k = split_heads(n, k, kv_heads_attr, "K");
    v = split_heads(n, v, kv_heads_attr, "V");
  }
  std::vector<int64_t> qs = n.static_shape(q, "Q"), ks = n.static_shape(k, "K"),
                       vs = n.static_shape(v, "V");
  if (rank == 4 && q_heads_attr > 0 && q_heads_attr != qs[1])
    n.error("attribute 'q_num_heads' = {} differs from Q's {} heads", q_heads_attr, qs[1]);
  if (rank == 4 && kv_heads_attr > 0 && kv_heads_attr != ks[1])
    n.error("attribute 'kv_num_heads' = {} differs from K's {} heads", kv_heads_attr, ks[1]);
  if (ks[1] == 0 || qs[1] % ks[1] != 0 || vs[1] != ks[1])
    n.error(
        "{} query heads and {} key / {} value heads: grouped-query attention needs the "
        "query heads to be a multiple of the key/value heads",
        qs[1], ks[1], vs[1]);

  // The KV cache: past before the new keys and values.
  const bool past_k = n.has_input(4), past_v = n.has_input(5);
  if (past_k != past_v) n.error("past_key and past_value must be given together");
  int64_t past = 0;
  if (past_k) {
    int pk = n.in(4), pv = n.in(5);
    if (n.dtype(pk) != t || n.dtype(pv) != t || n.rank(pk) != 4 || n.rank(pv) != 4)
      n.error("past_key and past_value must be 4-D {} [B, Hkv, P, D]", dtype_name(t));
    past = n.static_shape(pk, "past_key")[2];
    k = n.add("concat", {pk, k}, Attrs{{"dim", int64_t{2}}});
    v = n.add("concat", {pv, v}, Attrs{{"dim", int64_t{2}}});
  }
  if (n.wants_output(1)) n.set_output(1, k);
  if (n.wants_output(2)) n.set_output(2, v);
  const int64_t heads = qs[1], tq = qs[2], tk = n.static_shape(k, "K")[2];

  // The mask, padded to the total key length.
  int mask = -1;
  bool bool_mask = false;
  if (n.has_input(3)) {
    mask = n.in(3);
    DType mt = n.dtype(mask);
    bool_mask = mt == DType::Bool;
    if (!bool_mask && !is_floating(mt))
      n.error("attn_mask must be bool or floating point, got {}", dtype_name(mt));
    std::vector<int64_t> ms = n.static_shape(mask, "attn_mask");
    if (ms.empty() || ms.size() > 4)
      n.error("attn_mask of rank {} does not broadcast to [B, H, Tq, Tk]", ms.size());
    if (ms.back() > tk) n.error("attn_mask covers {} keys, more than the {} keys", ms.back(), tk);
    if (ms.back() < tk) {  // (a mask of the new keys only, or of a shorter window)
      std::vector<int64_t> pad = ms;
      pad.back() = tk - ms.back();
      Attrs fill{{"shape", pad}, {"value", bool_mask ? 0.0 : -INFINITY}, {"dtype", mt}};
      mask = n.add("concat", {mask, n.add("full", {}, fill)},
                   Attrs{{"dim", static_cast<int64_t>(ms.size() - 1)}});
    }
  }
  // is_causal: j <= i + past. coil's causal (j <= i + tk - tq) is that when tk - tq == past.
  bool coil_causal = is_causal && tk - tq == past;
  if (is_causal && !coil_causal) {
    int tri = causal_triangle(n, tq, tk, past);
    if (mask < 0) {
      mask = tri, bool_mask = true;
    } else if (bool_mask) {
      mask = n.add("logical_and", {mask, tri});
    } else {
      DType mt = n.dtype(mask);
      mask = n.add("where", {tri, mask, n.scalar(-INFINITY, mt)});
    }
  }
  const double scale = has_scale ? scale_attr : 1.0 / std::sqrt(static_cast<double>(qs[3]));

  const bool qk_out = n.wants_output(3);
  if (qk_out && (mode == 1 || mode == 2))
    unsupported(
        "attribute 'qk_matmul_output_mode' = {} is not implemented (the "
        "qk_matmul_output output is read; modes 0 and 3 are)",
        mode);
  if (qk_out && mode == 0 && softcap != 0)
    unsupported("attribute 'qk_matmul_output_mode' = 0 with softcap = {} is not implemented",
                softcap);

  int y;
  if (softcap == 0 && !qk_out) {
    std::vector<int> ins{q, k, v};
    if (mask >= 0) ins.push_back(mask);
    Attrs attrs{{"scale", scale}};
    if (coil_causal) attrs.set("causal", true);
    y = n.add("attention", ins, attrs);
  } else {  // written out: softcap, or the scores / probabilities as an output
    const DType ct = t == DType::F64 ? DType::F64 : DType::F32;
    int kx = expand_heads(n, n.cast(k, ct), heads), vx = expand_heads(n, n.cast(v, ct), heads);
    int kt = n.add("transpose", {kx}, Attrs{{"dim0", int64_t{2}}, {"dim1", int64_t{3}}});
    int s = n.add("mul", {n.add("matmul", {n.cast(q, ct), kt}), n.scalar(scale, ct)});
    int qk = s;
    if (softcap != 0) {
      int capped = n.add("tanh", {n.add("div", {s, n.scalar(softcap, ct)})});
      s = n.add("mul", {capped, n.scalar(softcap, ct)});
    }
    if (mask >= 0 && bool_mask) s = n.add("where", {mask, s, n.scalar(-INFINITY, ct)});
    if (mask >= 0 && !bool_mask) s = n.add("add", {s, n.cast(mask, ct)});
    if (coil_causal)
      s = n.add("where", {causal_triangle(n, tq, tk, past), s, n.scalar(-INFINITY, ct)});
    int p = n.add("softmax", {s}, Attrs{{"axis", int64_t{3}}});
    y = n.cast(n.add("matmul", {p, vx}), t);
    if (qk_out) n.set_output(3, n.cast(mode == 0 ? qk : p, t));
  }
  n.set_output(0, rank == 3 ? merge_heads(n, y) : y);
}

int onnx_semantics_changed(std::string_view op, int opset) {
  // The ops coil maps whose definition changed in opsets 18 to 23 in a way its opset-17 mapping
  // would misread (an input or attribute added, a mode renamed); the other new versions of those
  // opsets extend types only (int4, bfloat16, float8, float4: onnx/defs/operator_sets.h), and
  // the Reduce ops' axes input of opset 18 is read already (onnx_ops_reduce.cpp).
  struct Change {
    std::string_view op;
    int opset;
  };
  static constexpr Change kChanges[] = {
      {"Pad", 18},
      {"Resize", 18},
      {"Split", 18},
      {"ScatterND", 18},
      {"ScatterElements", 18},
      {"LpPool", 18},
      {"GroupNormalization", 18},
      {"AveragePool", 19},
      {"Pad", 19},
      {"Resize", 19},
      {"DequantizeLinear", 19},
      {"QuantizeLinear", 19},
      {"DFT", 20},
      {"GridSample", 20},
      {"GroupNormalization", 21},
      {"DequantizeLinear", 21},
      {"QuantizeLinear", 21},
      {"QLinearMatMul", 21},
  };
  for (const Change& c : kChanges)
    if (c.op == op && c.opset > 17 && c.opset <= opset) return c.opset;
  return 0;
}

}  // namespace coil::onnxfe
