// The two special shapes of CppVecKernel, as the plan gives them (cpp_plan_nest.cpp says
// when): CppTile2DKernel, a transpose read through lanes x lanes tiles, and the row-split
// column reduction.
#include <algorithm>

#include "codegen/cpp/cpp_vec_ops.h"

namespace coil {

void emit_row_split_reduction(NestPrinter& p, const Nest& n, const CppNestPlan& np) {
  const CppVecPlan& vp = *np.vec;
  const int64_t cols = n.ranges[0], lanes = p.plan().lanes;
  const int64_t chunks = np.row_split.chunks;
  CodeWriter& w = p.writer();
  sym::Analyzer a = nest_analyzer(n);
  auto inside = [&](int i) { return !n.after[static_cast<size_t>(i)]; };
  auto after = [&](int i) { return n.after[static_cast<size_t>(i)]; };
  const int64_t full = cols / lanes * lanes;
  std::vector<std::string> streams, parts;  // the input pointers; the partial rows' pointers
  // Runs `body(count)` over the columns: whole vectors, then a masked tail (one step for both).
  auto over_columns = [&](const std::function<void(const std::string&)>& body) {
    if (full > 0 && cols % lanes != 0) {
      w.open();
      print_vec_step(
          p, n, "x0", "", [&] { body(kStepCount); }, parts);
      w.linef("for (int64_t x0 = 0; x0 < {}; x0 += {})", full, lanes);
      w.linef("    step(x0, {});", lanes);
      w.linef("step({}, {});", full, cols - full);
      w.close();
      return;
    }
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
  for (const BodyOp& op : n.body.ops())
    if (op.op == LoopOp::load && op.buffer >= 0) {
      std::string ptr = p.plan().pointer(op.buffer);
      if (std::find(streams.begin(), streams.end(), ptr) == streams.end()) streams.push_back(ptr);
    }
  for (size_t k = 0; k < n.reductions.size(); ++k) {
    parts.push_back(p.new_acc() + "_part");
    w.linef("coil::ScratchArray<float> {}_storage({}, {{{}}});", parts.back(), chunks * cols,
            fmt::join(streams, ", "));
    w.linef("float* const {0} = {0}_storage.get();", parts.back());
    streams.push_back(parts.back());
  }
  const std::string& rows_text = n.red_range_text[0];
  const std::string& chunk_text = np.row_split.rows_per_chunk_text;
  w.linef("// {} rows in {} chunks of {}: partial column results, combined in chunk order",
          rows_text, chunks, chunk_text);
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
          chunk_text, rows_text);
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

/// Whether a row of the tile body lies a size-dependent distance from the next: some access
/// other than the transposed ones moves by a non-constant when x0 steps (y[x1 + ks0 * x0]).
bool symbolic_row_stride(const Nest& n, const std::map<int, std::string>& tiles) {
  const sym::Expr x0 = loop_var(0);
  for (size_t i = 0; i < n.body.ops().size(); ++i) {
    const BodyOp& op = n.body.op(static_cast<int>(i));
    if ((op.op != LoopOp::load && op.op != LoopOp::store) || tiles.count(static_cast<int>(i)))
      continue;
    if (!(sym::substitute(op.index, {{x0, x0 + 1}}) - op.index).as_const()) return true;
  }
  return false;
}

void emit_tile2d_nest(NestPrinter& p, const Nest& n, const CppNestPlan& np) {
  const CppVecPlan& vp = *np.vec;
  const CppTilePlan& tp = np.tile;
  sym::Analyzer a = nest_analyzer(n);
  std::map<int, std::string> tiles;  // transposed load op -> its tile array
  for (const auto& [i, stride] : tp.tiles) tiles[i] = p.tmp(n, i) + "_tile";
  const int64_t L = p.plan().lanes;
  const int64_t block_rows = tp.block_rows, block_cols = tp.block_cols;
  const bool full = tp.whole_tiles, blocked = tp.blocked, parallel = np.parallel;
  // Loop bounds as the nest's extents print (a size symbol stays one); the plan's numbers
  // (blocks, whole tiles) were decided at the size hints and show in the source.
  const std::string& rows_text = n.range_text[0];
  const std::string& cols_text = n.range_text[1];
  // Rows a size apart: each row's x0 is hidden from the optimizer, so that GCC computes the
  // row's offsets from it (an imul) instead of keeping 2 x L row pointers live across tiles.
  // GCC 13 spills those (176 stack references against 30 with constant strides) and the
  // size-generic x.t() + y ran 13-21% slower than the specialized kernel on the GPU host's
  // Xeon (bench/experiments/f_tile/).
  const bool opaque_rows = symbolic_row_stride(n, tiles);
  CodeWriter& w = p.writer();
  w.linef(
      "// 2-D tiles of {0}x{0}{1}: transposed operands are read along x0, transposed in "
      "registers",
      L, blocked ? fmt::format(" in blocks of {}x{}", block_rows, block_cols) : "");
  if (opaque_rows)
    w.line("// rows are a size apart: coil::opaque_index keeps GCC from a pointer per row");
  // One tile's body: `whole`, all L x L elements with plain vector ops; else `rows` x `cols`
  // of them, masked.
  auto emit_tile = [&](bool whole) {
    for (const auto& [i, tile] : tiles) {
      const BodyOp& op = n.body.op(i);
      w.linef("alignas(64) float {}[{}];", tile, L * L);
      // Source row b: elements (x0_tile + 0..rows, x1_tile + b), contiguous, tp.tiles[i]
      // apart. coil::transpose_tile loads the cols x rows block as row vectors (masked in the
      // tails), transposes it in registers and stores tile[a][b].
      w.open();
      w.line("const int64_t x0 = x0_tile;");
      w.line("const int64_t x1 = x1_tile;");
      w.linef("coil::transpose_tile(&{}, {}, {}, {}, {});", p.access(n, op.buffer, op.index, a),
              tp.tiles.at(i), tile, L, whole ? fmt::format("{0}, {0}", L) : "cols, rows");
      w.close();
    }
    w.linef("for (int64_t a = 0; a < {}; a++)", whole ? std::to_string(L) : "rows");
    w.open();
    w.line(opaque_rows ? "const int64_t x0 = coil::opaque_index(x0_tile + a);"
                       : "const int64_t x0 = x0_tile + a;");
    w.line("const int64_t x1 = x1_tile;");
    VecOpPrinter(p, n, a, vp, whole ? "" : "cols", tiles).emit([](int) { return true; });
    w.close();
  };
  // Where L may not divide an extent (a size symbol's, or a constant's), the loops below run
  // the whole tiles only, unmasked (the code a divisible size gets: GCC keeps such a tile in
  // registers, where one loop with a masked edge case made it spill the tile to the stack and
  // ran 15-25% slower), and two more loops after them the masked edge tiles.
  auto whole_part = [&](const std::string& text) {
    const std::string l = std::to_string(L);
    if (full) return text;
    if (text.find_first_not_of("0123456789") == std::string::npos)
      return std::to_string(std::stoll(text) / L * L);
    return fmt::format("({} / {} * {})", text, l, l);
  };
  const std::string rows_whole = whole_part(rows_text), cols_whole = whole_part(cols_text);
  if (blocked) {
    if (parallel) w.line("#pragma omp parallel for collapse(2)");
    w.linef("for (int64_t x0_block = 0; x0_block < {}; x0_block += {})", rows_whole, block_rows);
    w.linef("for (int64_t x1_block = 0; x1_block < {}; x1_block += {})", cols_whole, block_cols);
    w.open();
    w.linef(
        "for (int64_t x0_tile = x0_block; x0_tile < std::min<int64_t>(x0_block + {}, {}); "
        "x0_tile += {})",
        block_rows, rows_whole, L);
    w.open();
    w.linef(
        "for (int64_t x1_tile = x1_block; x1_tile < std::min<int64_t>(x1_block + {}, {}); "
        "x1_tile += {})",
        block_cols, cols_whole, L);
    w.open();
  } else {
    if (parallel) w.line("#pragma omp parallel for");
    w.linef("for (int64_t x0_tile = 0; x0_tile < {}; x0_tile += {})", rows_whole, L);
    w.open();
    w.linef("for (int64_t x1_tile = 0; x1_tile < {}; x1_tile += {})", cols_whole, L);
    w.open();
  }
  emit_tile(true);
  w.close();
  w.close();
  if (blocked) w.close();
  if (full) return;
  // The edge tiles: the columns past the last whole tile (every row), then the rows past it.
  auto edge = [&](const std::string& x0_from, const std::string& x0_to, const std::string& x1_from,
                  const std::string& x1_to) {
    if (parallel) w.line("#pragma omp parallel for");
    w.linef("for (int64_t x0_tile = {}; x0_tile < {}; x0_tile += {})", x0_from, x0_to, L);
    w.open();
    w.linef("for (int64_t x1_tile = {}; x1_tile < {}; x1_tile += {})", x1_from, x1_to, L);
    w.open();
    w.linef("const int64_t rows = std::min<int64_t>({}, {} - x0_tile);", L, rows_text);
    w.linef("const int64_t cols = std::min<int64_t>({}, {} - x1_tile);", L, cols_text);
    emit_tile(false);
    w.close();
    w.close();
  };
  if (cols_whole != cols_text) edge("0", rows_text, cols_whole, cols_text);
  if (rows_whole != rows_text) edge(rows_whole, rows_text, "0", cols_whole);
}

}  // namespace coil
