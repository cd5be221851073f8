// CppVecKernel: explicit SIMD for one loop nest, with coil_vec.h's coil::Vec<float> (the ISA's
// float register; kFloatLanes lanes). One loop steps by the vector width:
//   * horizontal reduction: the innermost r loop; vector accumulators, reduced across lanes
//     after the loop (in coil_vec.h's fixed order), then the scalar epilogue;
//   * pointwise and vertical reduction: the innermost x loop; each lane is one output.
// Accesses along the vector loop: stride 0 broadcasts a scalar, stride 1 is a vector load or
// store, any other stride gathers lane by lane. The main loop covers whole vectors; the tail
// (size % kFloatLanes elements) runs the same body with masked loads and stores, which never
// touch memory past the end.
#include <map>
#include <set>

#include "codegen/cpp/cpp_nest.h"
#include "codegen/cpp/cpp_plan.h"
#include "ir/ir.h"
#include "support/check.h"

namespace coil {
namespace {

constexpr const char* kVec = "coil::Vec<float>";

/// Prints the vector ops of a nest, for a main loop (count empty) or its tail (count "tail").
class VecOpPrinter {
 public:
  VecOpPrinter(NestPrinter& p, const Nest& n, const sym::Analyzer& a, const CppVecPlan& v,
               std::string count, std::map<int, std::string> tiles = {})
      : p_(p),
        n_(n),
        a_(a),
        v_(v),
        var_(var_of(v.loop)),
        count_(std::move(count)),
        tiles_(std::move(tiles)) {}

  void emit(const std::function<bool(int)>& pick) {
    CodeWriter& w = p_.writer();
    for (int i = 0; i < static_cast<int>(n_.body.ops().size()); ++i) {
      if (!pick(i)) continue;
      const BodyOp& op = n_.body.op(i);
      std::string t = p_.tmp(n_, i);
      auto arg = [&](int k) { return p_.tmp(n_, op.args[static_cast<size_t>(k)]); };
      switch (op.op) {
        case LoopOp::reduction:
          break;
        case LoopOp::load:
          if (tiles_.count(i)) {
            // A row of a transposed tile (CppTile2DKernel), contiguous in L1.
            w.linef("auto {} = {}::loadu(&{}[a * {}]{});", t, kVec, tiles_.at(i), p_.lanes(),
                    count_arg());
          } else {
            emit_load(i, op, t);
          }
          break;
        case LoopOp::store: {
          if (p_.store_dropped(op.buffer)) break;
          COIL_ASSERT(stride_along(a_, op.index, var_) == 1, "vector store must be contiguous");
          bool stream = count_.empty() && v_.streamed.count(i);
          w.linef("{}.{}(&{}{});", arg(0), stream ? "store_stream" : "store",
                  p_.access(n_, op.buffer, op.index, a_), count_arg());
          break;
        }
        case LoopOp::constant:
          w.linef("auto {} = {}({});", t, kVec, cpp_float(op.fvalue));
          break;
        case LoopOp::neg:
          w.linef("auto {} = -{};", t, arg(0));
          break;
        case LoopOp::add:
          w.linef("auto {} = {} + {};", t, arg(0), arg(1));
          break;
        case LoopOp::sub:
          w.linef("auto {} = {} - {};", t, arg(0), arg(1));
          break;
        case LoopOp::mul:
          w.linef("auto {} = {} * {};", t, arg(0), arg(1));
          break;
        case LoopOp::div:
          w.linef("auto {} = {} / {};", t, arg(0), arg(1));
          break;
        case LoopOp::pow:
        case LoopOp::maximum:
        case LoopOp::minimum:
        case LoopOp::fmod:
          w.linef("auto {} = {}.{}({});", t, arg(0), loop_op_name(op.op), arg(1));
          break;
        default:
          w.linef("auto {} = {}.{}();", t, arg(0), loop_op_name(op.op));
      }
    }
  }

 private:
  std::string count_arg() const { return count_.empty() ? "" : ", " + count_; }

  static std::string cpp_float(double v) {
    if (std::isnan(v)) return "std::numeric_limits<float>::quiet_NaN()";
    if (std::isinf(v))
      return v > 0 ? "std::numeric_limits<float>::infinity()"
                   : "-std::numeric_limits<float>::infinity()";
    std::string s = fmt::format("{}", static_cast<float>(v));
    if (s.find_first_of(".e") == std::string::npos) s += ".0";
    return s + "f";
  }

  void emit_load(int i, const BodyOp& op, const std::string& t) {
    CodeWriter& w = p_.writer();
    std::string lv = p_.access(n_, op.buffer, op.index, a_);
    int64_t s = stride_along(a_, op.index, var_);
    if (s == 0) {
      w.linef("auto {} = {}(static_cast<float>({}));", t, kVec, lv);
    } else if (s == 1) {
      w.linef("auto {} = {}::loadu(&{}{});", t, kVec, lv, count_arg());
      auto ahead = v_.prefetch.find(i);
      if (ahead != v_.prefetch.end()) w.linef("coil::prefetch_ahead(&{}, {});", lv, ahead->second);
    } else {
      // Gather: each lane reads at its own index (the loop variable shadowed per lane).
      std::string v = var_.symbol_name();
      w.linef("alignas(64) float {}_lanes[{}] = {{}};", t, p_.lanes());
      w.open();
      w.linef("const int64_t {0}_vec = {0};", v);
      w.linef("for (int64_t lane = 0; lane < {}; lane++)",
              count_.empty() ? std::to_string(p_.lanes()) : count_);
      w.open();
      w.linef("const int64_t {0} = {0}_vec + lane;", v);
      w.linef("{}_lanes[lane] = static_cast<float>({});", t, lv);
      w.close();
      w.close();
      w.linef("auto {0} = {1}::loadu({0}_lanes);", t, kVec);
    }
  }

  NestPrinter& p_;
  const Nest& n_;
  const sym::Analyzer& a_;
  const CppVecPlan& v_;
  sym::Expr var_;
  std::string count_;
  std::map<int, std::string> tiles_;  // op -> tile array holding its transposed values
};

struct VecReduction {
  std::string init, combine, finalize;  // {acc} {v}; finalize reduces lanes
};

VecReduction vec_reduction(ReductionType t) {
  switch (t) {
    case ReductionType::sum:
      return {"0.0f", "{acc} + {v}", "{acc}.reduce_add()"};
    case ReductionType::prod:
      return {"1.0f", "{acc} * {v}", "{acc}.reduce_mul()"};
    case ReductionType::max:
      return {"coil::lowest<float>()", "{acc}.maximum({v})", "{acc}.reduce_max()"};
    case ReductionType::min:
      return {"coil::highest<float>()", "{acc}.minimum({v})", "{acc}.reduce_min()"};
    default:
      COIL_UNREACHABLE("{} has no vector form", reduction_type_name(t));
  }
}

/// The first element of the streamed store that the plan found off the vector alignment (its
/// access with the vector variable 0, e.g. out[1000*x0] with 16 lanes).
std::string stream_head_start(const NestPrinter& p, const Nest& n, const sym::Analyzer& a,
                              const CppVecPlan& v) {
  const BodyOp& op = n.body.op(v.stream_head_store);
  sym::Expr start = a.simplify(sym::substitute(op.index, {{var_of(v.loop), sym::Expr(0)}}));
  return p.access(n, op.buffer, start, a);
}

/// `v` from `begin` to `end` (C++ expressions, known at run time): whole vectors, then one
/// masked tail of `tail` lanes. `body(count)` prints one vector's ops ("" = whole).
void emit_whole_and_tail(CodeWriter& w, const std::string& v, const std::string& begin,
                         const std::string& end, int64_t lanes,
                         const std::function<void(const std::string&)>& body) {
  w.linef("int64_t {0} = {1};", v, begin);
  w.linef("for (; {0} + {1} <= {2}; {0} += {1})", v, lanes, end);
  w.open();
  body("");
  w.close();
  w.linef("if ({} < {})", v, end);
  w.open();
  w.linef("const int64_t tail = {} - {};", end, v);
  body("tail");
  w.close();
}

}  // namespace

void emit_vec_nest(NestPrinter& p, const Nest& n, const CppNestPlan& np) {
  COIL_ASSERT(np.vec.has_value(), "emit_vec_nest on a nest without a vector plan");
  const CppVecPlan& vp = *np.vec;
  const VecLoop& vl = vp.loop;
  CodeWriter& w = p.writer();
  sym::Analyzer a = nest_analyzer(n);
  size_t x_end = vl.reduction ? n.ranges.size() : vl.index;
  for (size_t i = np.first_loop; i < x_end; ++i) {
    w.linef("for (int64_t x{0} = 0; x{0} < {1}; x{0}++)", i, n.ranges[i]);
    w.open();
  }
  // The vector loop as a main part of whole vectors and a masked tail.
  std::string v = vl.reduction ? fmt::format("r{}", vl.index) : fmt::format("x{}", vl.index);
  const int64_t extent = vp.extent;
  const int64_t lanes = p.lanes(), full = extent / lanes * lanes;
  auto main_and_tail = [&](const std::function<void(const std::string& count)>& body, bool par) {
    if (full > 0) {
      if (par) w.line("#pragma omp parallel for");
      w.linef("for (int64_t {0} = 0; {0} < {1}; {0} += {2})", v, full, lanes);
      w.open();
      body("");
      w.close();
    }
    if (extent % lanes != 0) {
      w.open();
      w.linef("const int64_t {} = {};", v, full);
      w.linef("const int64_t tail = {};", extent - full);
      body("tail");
      w.close();
    }
  };
  // Invariants first, once; the loops below print the other ops.
  if (!vp.invariant.empty()) {
    w.linef("// the same in every iteration of {}: computed once", v);
    VecOpPrinter(p, n, a, vp, "").emit([&](int i) { return vp.invariant.count(i) > 0; });
  }
  auto inside = [&](int i) { return !n.after[static_cast<size_t>(i)] && !vp.invariant.count(i); };
  auto after = [&](int i) { return n.after[static_cast<size_t>(i)] && !vp.invariant.count(i); };

  if (n.reductions.empty()) {
    auto body = [&](const std::string& count) { VecOpPrinter(p, n, a, vp, count).emit(inside); };
    if (vp.stream_head_store < 0) {
      main_and_tail(body, np.parallel);
    } else {
      // The streamed output's rows start off the vector alignment: a masked head up to it,
      // then whole vectors that all stream, then the tail.
      w.open();
      w.linef("const int64_t head = coil::stream_head(&{}, {});", stream_head_start(p, n, a, vp),
              extent);
      w.line("if (head > 0)");
      w.open();
      w.linef("const int64_t {} = 0;", v);
      body("head");
      w.close();
      emit_whole_and_tail(w, v, "head", std::to_string(extent), lanes, body);
      w.close();
    }
  } else if (vl.reduction) {
    // Horizontal: vector accumulators over the r loops, reduced across lanes at the end.
    auto cascade = [&](size_t k) { return vp.cascade[k]; };
    std::vector<std::string> accs;
    for (size_t k = 0; k < n.reductions.size(); ++k) {
      int red = n.reductions[k];
      accs.push_back(p.new_acc() + "_vec");
      if (cascade(k)) {
        w.linef("coil::CascadeSum<{}> {};", kVec, accs.back());
      } else {
        w.linef("auto {} = {}({});", accs.back(), kVec,
                vec_reduction(n.body.op(red).reduction).init);
      }
    }
    const int64_t vectors = extent / lanes;
    const bool unroll = vp.accumulators > 1;
    std::vector<std::vector<std::string>> part_accs(accs.size());
    if (unroll) {
      for (size_t k = 0; k < accs.size(); ++k) {
        part_accs[k].push_back(accs[k]);
        for (int u = 1; u < vp.accumulators; ++u) {
          part_accs[k].push_back(fmt::format("{}{}", accs[k], u));
          w.linef("auto {} = {};", part_accs[k].back(), accs[k]);
        }
      }
    }
    auto combine_into = [&](size_t k, const std::string& acc, const std::string& count) {
      const BodyOp& rop = n.body.op(n.reductions[k]);
      std::string c = subst(subst(vec_reduction(rop.reduction).combine, "{acc}", acc), "{v}",
                            p.tmp(n, rop.args[0]));
      if (count.empty())
        w.linef("{} = {};", acc, c);
      else
        w.linef("{0} = {1}::set({0}, {2}, {3});", acc, kVec, c, count);
    };
    if (unroll) {
      const int64_t step = lanes * vp.accumulators, unrolled = vectors / vp.accumulators * step;
      for (size_t j = 0; j + 1 < n.red_ranges.size(); ++j) {
        w.linef("for (int64_t r{0} = 0; r{0} < {1}; r{0}++)", j, n.red_ranges[j]);
        w.open();
      }
      w.linef("for (int64_t {0}_base = 0; {0}_base < {1}; {0}_base += {2})", v, unrolled, step);
      w.open();
      for (int u = 0; u < vp.accumulators; ++u) {
        w.open();
        w.linef("const int64_t {0} = {0}_base + {1};", v, u * lanes);
        VecOpPrinter(p, n, a, vp, "").emit(inside);
        for (size_t k = 0; k < accs.size(); ++k) combine_into(k, part_accs[k][u], "");
        w.close();
      }
      w.close();
      if (unrolled < full) {
        w.linef("for (int64_t {0} = {1}; {0} < {2}; {0} += {3})", v, unrolled, full, lanes);
        w.open();
        VecOpPrinter(p, n, a, vp, "").emit(inside);
        for (size_t k = 0; k < accs.size(); ++k) combine_into(k, accs[k], "");
        w.close();
      }
      if (extent % lanes != 0) {
        w.open();
        w.linef("const int64_t {} = {};", v, full);
        w.linef("const int64_t tail = {};", extent - full);
        VecOpPrinter(p, n, a, vp, "tail").emit(inside);
        for (size_t k = 0; k < accs.size(); ++k) combine_into(k, accs[k], "tail");
        w.close();
      }
      for (size_t j = 0; j + 1 < n.red_ranges.size(); ++j) w.close();
      // Pairwise, in a fixed order: (a0 + a1) + (a2 + a3).
      for (size_t k = 0; k < accs.size(); ++k) {
        const std::string& comb = vec_reduction(n.body.op(n.reductions[k]).reduction).combine;
        auto pair = [&](const std::string& x, const std::string& y) {
          return subst(subst(comb, "{acc}", x), "{v}", y);
        };
        std::vector<std::string> level = part_accs[k];
        while (level.size() > 1) {
          std::vector<std::string> next;
          for (size_t i = 0; i + 1 < level.size(); i += 2)
            next.push_back(fmt::format("({})", pair(level[i], level[i + 1])));
          if (level.size() % 2) next.push_back(level.back());
          level = std::move(next);
        }
        w.linef("{} = {};", accs[k], level[0].substr(1, level[0].size() - 2));
      }
    } else {
      for (size_t j = 0; j + 1 < n.red_ranges.size(); ++j) {
        w.linef("for (int64_t r{0} = 0; r{0} < {1}; r{0}++)", j, n.red_ranges[j]);
        w.open();
      }
      main_and_tail(
          [&](const std::string& count) {
            VecOpPrinter(p, n, a, vp, count).emit(inside);
            for (size_t k = 0; k < accs.size(); ++k) {
              const BodyOp& rop = n.body.op(n.reductions[k]);
              std::string v = p.tmp(n, rop.args[0]);
              if (cascade(k)) {
                if (count.empty())
                  w.linef("{}.add({});", accs[k], v);
                else
                  w.linef("{}.add({}::set({}(0.0f), {}, {}));", accs[k], kVec, kVec, v, count);
                continue;
              }
              combine_into(k, accs[k], count);
            }
          },
          false);
      for (size_t j = 0; j + 1 < n.red_ranges.size(); ++j) w.close();
    }
    for (size_t k = 0; k < accs.size(); ++k) {
      int red = n.reductions[k];
      std::string acc = cascade(k) ? accs[k] + ".result()" : accs[k];
      w.linef("float {} = {};", p.tmp(n, red),
              subst(vec_reduction(n.body.op(red).reduction).finalize, "{acc}", acc));
    }
    p.emit_scalar_ops(n, a, after);
  } else {
    // Vertical: each lane accumulates its own output over the scalar r loops.
    main_and_tail(
        [&](const std::string& count) {
          std::vector<std::string> accs;
          for (int red : n.reductions) {
            accs.push_back(p.new_acc() + "_vec");
            w.linef("auto {} = {}({});", accs.back(), kVec,
                    vec_reduction(n.body.op(red).reduction).init);
          }
          for (size_t j = 0; j < n.red_ranges.size(); ++j) {
            w.linef("for (int64_t r{0} = 0; r{0} < {1}; r{0}++)", j, n.red_ranges[j]);
            w.open();
          }
          VecOpPrinter(p, n, a, vp, count).emit(inside);
          for (size_t k = 0; k < accs.size(); ++k) {
            const BodyOp& rop = n.body.op(n.reductions[k]);
            w.linef("{} = {};", accs[k],
                    subst(subst(vec_reduction(rop.reduction).combine, "{acc}", accs[k]), "{v}",
                          p.tmp(n, rop.args[0])));
          }
          for (size_t j = 0; j < n.red_ranges.size(); ++j) w.close();
          for (size_t k = 0; k < accs.size(); ++k)
            w.linef("auto {} = {};", p.tmp(n, n.reductions[k]), accs[k]);
          VecOpPrinter(p, n, a, vp, count).emit(after);
        },
        np.parallel);
  }
  for (size_t i = np.first_loop; i < x_end; ++i) w.close();
}

void emit_vec_segment(NestPrinter& p, const Nest& n, const CppNestPlan& np,
                      const std::string& begin, const std::string& end) {
  const CppVecPlan& vp = *np.vec;
  CodeWriter& w = p.writer();
  sym::Analyzer a = nest_analyzer(n);
  std::string v = fmt::format("x{}", vp.loop.index);
  auto all = [](int) { return true; };
  emit_whole_and_tail(w, v, begin, end, p.lanes(), [&](const std::string& count) {
    VecOpPrinter(p, n, a, vp, count).emit(all);
  });
}

void emit_row_split_reduction(NestPrinter& p, const Nest& n, const CppNestPlan& np) {
  const CppVecPlan& vp = *np.vec;
  const int64_t cols = n.ranges[0], rows = n.red_ranges[0], lanes = p.lanes();
  const int64_t chunks = np.row_split.chunks, rows_per_chunk = np.row_split.rows_per_chunk;
  CodeWriter& w = p.writer();
  sym::Analyzer a = nest_analyzer(n);
  auto inside = [&](int i) { return !n.after[static_cast<size_t>(i)]; };
  auto after = [&](int i) { return n.after[static_cast<size_t>(i)]; };
  const int64_t full = cols / lanes * lanes;
  // Runs `body(count)` over the columns: whole vectors, then a masked tail.
  auto over_columns = [&](const std::function<void(const std::string&)>& body) {
    if (full > 0) {
      w.linef("for (int64_t x0 = 0; x0 < {}; x0 += {})", full, lanes);
      w.open();
      body("");
      w.close();
    }
    if (cols % lanes != 0) {
      w.open();
      w.linef("const int64_t x0 = {};", full);
      w.linef("const int64_t tail = {};", cols - full);
      body("tail");
      w.close();
    }
  };
  auto cnt = [](const std::string& c) { return c.empty() ? std::string() : ", " + c; };
  // The partial rows are placed away from the input rows and each other in the low 12 address
  // bits (coil::ScratchArray: 4K aliasing), and reached through a plain pointer: through the
  // array object, the loop would reload its data pointer after every vector store (an
  // intrinsic store may alias anything).
  std::vector<std::string> streams, parts;
  for (const BodyOp& op : n.body.ops())
    if (op.op == LoopOp::load && op.buffer >= 0) {
      std::string ptr = p.pointer(op.buffer);
      if (std::find(streams.begin(), streams.end(), ptr) == streams.end()) streams.push_back(ptr);
    }
  for (size_t k = 0; k < n.reductions.size(); ++k) {
    parts.push_back(p.new_acc() + "_part");
    w.linef("coil::ScratchArray<float> {}_storage({}, {{{}}});", parts.back(), chunks * cols,
            fmt::join(streams, ", "));
    w.linef("float* const {0} = {0}_storage.get();", parts.back());
    streams.push_back(parts.back());
  }
  w.linef("// {} rows in {} chunks of {}: partial column results, combined in chunk order", rows,
          chunks, rows_per_chunk);
  w.line("#pragma omp parallel for");
  w.linef("for (int64_t c = 0; c < {}; c++)", chunks);
  w.open();
  over_columns([&](const std::string& count) {
    for (size_t k = 0; k < parts.size(); ++k) {
      w.linef("{}({}).store(&{}[c * {} + x0]{});", kVec,
              vec_reduction(n.body.op(n.reductions[k]).reduction).init, parts[k], cols, cnt(count));
    }
  });
  w.linef("for (int64_t r0 = c * {0}; r0 < std::min<int64_t>(c * {0} + {0}, {1}); r0++)",
          rows_per_chunk, rows);
  w.open();
  over_columns([&](const std::string& count) {
    VecOpPrinter(p, n, a, vp, count).emit(inside);
    for (size_t k = 0; k < parts.size(); ++k) {
      const BodyOp& rop = n.body.op(n.reductions[k]);
      std::string acc =
          fmt::format("{}::loadu(&{}[c * {} + x0]{})", kVec, parts[k], cols, cnt(count));
      std::string c = subst(subst(vec_reduction(rop.reduction).combine, "{acc}", "(" + acc + ")"),
                            "{v}", p.tmp(n, rop.args[0]));
      w.linef("({}).store(&{}[c * {} + x0]{});", c, parts[k], cols, cnt(count));
    }
  });
  w.close();
  w.close();
  over_columns([&](const std::string& count) {
    for (size_t k = 0; k < parts.size(); ++k) {
      int red = n.reductions[k];
      std::string acc = p.tmp(n, red);
      w.linef("auto {} = {}::loadu(&{}[x0]{});", acc, kVec, parts[k], cnt(count));
      w.linef("for (int64_t c = 1; c < {}; c++)", chunks);
      w.open();
      std::string c =
          subst(subst(vec_reduction(n.body.op(red).reduction).combine, "{acc}", acc), "{v}",
                fmt::format("{}::loadu(&{}[c * {} + x0]{})", kVec, parts[k], cols, cnt(count)));
      w.linef("{} = {};", acc, c);
      w.close();
    }
    VecOpPrinter(p, n, a, vp, count).emit(after);
  });
}

void emit_tile2d_nest(NestPrinter& p, const Nest& n, const CppNestPlan& np) {
  const CppVecPlan& vp = *np.vec;
  const CppTilePlan& tp = np.tile;
  sym::Analyzer a = nest_analyzer(n);
  std::map<int, std::string> tiles;  // transposed load op -> its tile array
  for (const auto& [i, stride] : tp.tiles) tiles[i] = p.tmp(n, i) + "_tile";
  const int64_t L = p.lanes(), rows = n.ranges[0], cols = n.ranges[1];
  const int64_t block_rows = tp.block_rows, block_cols = tp.block_cols;
  const bool full = tp.whole_tiles, blocked = tp.blocked, parallel = np.parallel;
  CodeWriter& w = p.writer();
  w.linef(
      "// 2-D tiles of {0}x{0}{1}: transposed operands are read along x0, transposed in "
      "registers",
      L, blocked ? fmt::format(" in blocks of {}x{}", block_rows, block_cols) : "");
  if (blocked) {
    if (parallel) w.line("#pragma omp parallel for collapse(2)");
    w.linef("for (int64_t x0_block = 0; x0_block < {}; x0_block += {})", rows, block_rows);
    w.linef("for (int64_t x1_block = 0; x1_block < {}; x1_block += {})", cols, block_cols);
    w.open();
    w.linef(
        "for (int64_t x0_tile = x0_block; x0_tile < std::min<int64_t>(x0_block + {}, {}); "
        "x0_tile += {})",
        block_rows, rows, L);
    w.open();
    w.linef(
        "for (int64_t x1_tile = x1_block; x1_tile < std::min<int64_t>(x1_block + {}, {}); "
        "x1_tile += {})",
        block_cols, cols, L);
    w.open();
  } else {
    if (parallel) w.line("#pragma omp parallel for");
    w.linef("for (int64_t x0_tile = 0; x0_tile < {}; x0_tile += {})", rows, L);
    w.open();
    w.linef("for (int64_t x1_tile = 0; x1_tile < {}; x1_tile += {})", cols, L);
    w.open();
  }
  if (full) {
    w.linef("constexpr int64_t rows = {0}, cols = {0};", L);
  } else {
    w.linef("const int64_t rows = std::min<int64_t>({}, {} - x0_tile);", L, rows);
    w.linef("const int64_t cols = std::min<int64_t>({}, {} - x1_tile);", L, cols);
  }
  for (const auto& [i, tile] : tiles) {
    const BodyOp& op = n.body.op(i);
    w.linef("alignas(64) float {}[{}];", tile, L * L);
    // Source row b: elements (x0_tile + 0..rows, x1_tile + b), contiguous, tp.tiles[i] apart.
    // coil::transpose_tile loads the cols x rows block as row vectors (masked in the tails),
    // transposes it in registers and stores tile[a][b].
    w.open();
    w.line("const int64_t x0 = x0_tile;");
    w.line("const int64_t x1 = x1_tile;");
    w.linef("coil::transpose_tile(&{}, {}, {}, {}, cols, rows);",
            p.access(n, op.buffer, op.index, a), tp.tiles.at(i), tile, L);
    w.close();
  }
  w.line("for (int64_t a = 0; a < rows; a++)");
  w.open();
  w.line("const int64_t x0 = x0_tile + a;");
  w.line("const int64_t x1 = x1_tile;");
  VecOpPrinter(p, n, a, vp, full ? "" : "cols", tiles).emit([](int) { return true; });
  w.close();
  w.close();
  w.close();
  if (blocked) w.close();
}

}  // namespace coil
