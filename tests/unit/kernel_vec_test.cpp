// coil_vec.h (the vector runtime header) built for every ISA this machine runs (and the portable
// 4-lane build, and clang): lane counts, masked loads/stores at every tail count against a
// guard page, converting loads/stores, bf16/f16 bit-exactness against coil_types.h,
// conversions between compute types, masks across lane types, gather/scatter, arange.
// The math and reductions are in kernel_vec_math_test.cpp; the program under test is
// tests/unit/kernel_vec/vec_program.cpp.
#include <cmath>
#include <cstdint>
#include <random>

#include "kernel_vec/harness.h"
#include "kernels/coil_types.h"

namespace coil::vec_test {
namespace {

class KernelVecTest : public VecFixture {};

TEST_P(KernelVecTest, LanesMatchTheIsaTable) {
  const IsaInfo& isa = isa_by_name(GetParam().isa);
  EXPECT_EQ(program_->lanes(kF32), isa.lanes(DType::F32));
  EXPECT_EQ(program_->lanes(kF64), isa.lanes(DType::F64));
  EXPECT_EQ(program_->lanes(kI32), isa.lanes(DType::I32));
  EXPECT_EQ(program_->lanes(kI64), isa.lanes(DType::I64));
  EXPECT_EQ(float_lanes_, isa.lanes(DType::F32));
}

// copy_<name> loads `count` elements of U into a vector of T with `lanes` lanes, stores them
// back with the same count, and stores every lane to `full`. Source and destination end at a
// PROT_NONE page, so touching element `count` or beyond crashes the test.
template <typename U, typename T>
void check_copy(const VecProgram& program, const std::string& name, int lanes,
                const std::vector<U>& values) {
  using Copy = void (*)(const void*, void*, void*, int64_t);
  Copy copy = program.fn<Copy>("copy_" + name);
  for (int count = 0; count <= 2 * lanes; ++count) {
    SCOPED_TRACE(fmt::format("copy_{} count {}", name, count));
    GuardedBuffer src_mem(count * sizeof(U) + 1), dst_mem(count * sizeof(U) + 1);
    U* src = src_mem.tail<U>(count);
    U* dst = dst_mem.tail<U>(count);
    U sentinel = values.back();
    for (int i = 0; i < count; ++i) {
      src[i] = values[i % (values.size() - 1)];
      dst[i] = sentinel;
    }
    std::vector<T> full(lanes, T(99));
    copy(src, dst, full.data(), count);
    int n = std::min(count, lanes);
    for (int i = 0; i < count; ++i) {
      U want = i < n ? src[i] : sentinel;
      EXPECT_EQ(bits_of(dst[i]), bits_of(want)) << "lane " << i;
    }
    for (int i = 0; i < lanes; ++i) {
      T want = T(0);
      if (i < n) {
        if constexpr (std::is_same_v<U, bfloat16> || std::is_same_v<U, half>) {
          want = static_cast<T>(static_cast<float>(src[i]));
        } else {
          want = static_cast<T>(src[i]);
        }
      }
      EXPECT_EQ(bits_of(full[i]), bits_of(want)) << "full lane " << i;
    }
  }
}

TEST_P(KernelVecTest, MaskedLoadsAndStoresTouchOnlyCountElements) {
  const VecProgram& p = *program_;
  // The last value of each list is the sentinel for untouched destination elements.
  check_copy<float, float>(p, "f32", p.lanes(kF32), {1.5f, -2.25f, 3e30f, -0.0f, 7.0f, 42.0f});
  check_copy<double, double>(p, "f64", p.lanes(kF64), {1.5, -2.25, 1e300, -0.0, 7.0, 42.0});
  check_copy<int32_t, int32_t>(p, "i32", p.lanes(kI32), {1, -2, INT32_MAX, INT32_MIN, 7, 42});
  check_copy<int64_t, int64_t>(p, "i64", p.lanes(kI64), {1, -2, INT64_MAX, INT64_MIN, 7, 42});
  check_copy<double, double>(p, "vec_f64", float_lanes_, {1.5, -2.25, 1e300, -0.0, 7.0, 42.0});
  check_copy<int64_t, int64_t>(p, "vec_i64", float_lanes_, {1, -2, INT64_MAX, 3, 7, 42});
}

TEST_P(KernelVecTest, ConvertingLoadsAndStores) {
  const VecProgram& p = *program_;
  int lanes = float_lanes_;
  auto bf = [](float f) { return bfloat16(f); };
  auto h = [](float f) { return half(f); };
  check_copy<bfloat16, float>(p, "bf16", lanes,
                              {bf(1.5f), bf(-3.0f), bf(1e30f), bf(0.0f), bf(-0.0f), bf(9.0f)});
  check_copy<half, float>(p, "f16", lanes,
                          {h(1.5f), h(-3.0f), h(65504.0f), h(6e-8f), h(-0.0f), h(9.0f)});
  check_copy<uint8_t, float>(p, "u8_f32", lanes, {0, 1, 127, 128, 200, 255, 77});
  check_copy<int8_t, int32_t>(p, "i8_i32", lanes, {0, 1, -1, 127, -128, -77, 55});
  check_copy<bool, float>(p, "bool_f32", lanes, {true, false, false, true, true});
  check_copy<uint8_t, int64_t>(p, "u8_i64", lanes, {0, 1, 127, 128, 255, 9});
}

// Float inputs for narrowing: specials, NaN payloads, subnormals, rounding ties of both formats,
// overflow edges of half, a sweep over the bit patterns and random values.
std::vector<float> narrowing_inputs() {
  std::vector<uint32_t> bits = {
      0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000, 0x7f800001,
      0x7fa12345, 0xffbfffff, 0x00000001, 0x007fffff, 0x80000001, 0x00800000, 0x7f7fffff,
      0xff7fffff, 0x3f808000, 0x3f818000, 0x3f808001, 0x3f807fff, 0x7f7f8000, 0x7f7f7fff,
      0x477fe000, 0x477fefff, 0x477ff000, 0x477ff001, 0x33800000, 0x33000000, 0x33c00000,
      0x38800000, 0x387fffff, 0x387fe000, 0x387ff000, 0x33000001, 0xb3000000, 0x3c000000};
  std::vector<float> out;
  for (uint32_t b : bits) out.push_back(std::bit_cast<float>(b));
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 65521) {
    out.push_back(std::bit_cast<float>(static_cast<uint32_t>(b)));
  }
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1000.0f);
  for (int i = 0; i < 20000; ++i) out.push_back(normal(rng));
  return out;
}

TEST_P(KernelVecTest, Bf16ConversionsMatchCoilTypesBitForBit) {
  // Widening: every one of the 65536 patterns (NaNs included).
  std::vector<bfloat16> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i].bits = static_cast<uint16_t>(i);
  std::vector<float> widened(all.size());
  program_->fn<void (*)(const bfloat16*, float*, int64_t)>("widen_bf16")(all.data(), widened.data(),
                                                                         65536);
  for (uint32_t i = 0; i < 65536; ++i) {
    ASSERT_EQ(bits_of(widened[i]), bits_of(static_cast<float>(all[i]))) << "bf16 bits " << i;
  }
  // Narrowing: round to nearest even, NaN quieted as coil::bfloat16 does.
  std::vector<float> in = narrowing_inputs();
  in.resize(in.size() - in.size() % 7 + 3);  // not a multiple of the lanes: ends in a tail
  std::vector<bfloat16> out(in.size());
  program_->fn<void (*)(const float*, bfloat16*, int64_t)>("narrow_bf16")(in.data(), out.data(),
                                                                          in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(out[i].bits, bfloat16(in[i]).bits)
        << "float bits " << std::hex << std::bit_cast<uint32_t>(in[i]);
  }
}

TEST_P(KernelVecTest, F16ConversionsMatchCoilTypesBitForBit) {
  std::vector<half> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i].bits = static_cast<uint16_t>(i);
  std::vector<float> widened(all.size());
  program_->fn<void (*)(const half*, float*, int64_t)>("widen_f16")(all.data(), widened.data(),
                                                                    65536);
  for (uint32_t i = 0; i < 65536; ++i) {
    ASSERT_EQ(bits_of(widened[i]), bits_of(static_cast<float>(all[i]))) << "half bits " << i;
  }
  std::vector<float> in = narrowing_inputs();
  in.resize(in.size() - in.size() % 7 + 5);
  std::vector<half> out(in.size());
  program_->fn<void (*)(const float*, half*, int64_t)>("narrow_f16")(in.data(), out.data(),
                                                                     in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(out[i].bits, half(in[i]).bits)
        << "float bits " << std::hex << std::bit_cast<uint32_t>(in[i]);
  }
}

template <typename T>
std::vector<T> conversion_inputs(int n) {
  std::vector<T> v;
  for (int i = 0; i < n; ++i) {
    double x = (i - n / 2) * 37.25 + (i % 4) * 0.5;  // fractions truncate toward zero
    if constexpr (std::is_integral_v<T>) x = std::trunc(x);
    v.push_back(static_cast<T>(x));
  }
  if constexpr (std::is_same_v<T, int64_t>) {
    v[1] = (int64_t{1} << 53) + 1;  // to float/double: a single correct rounding
    v[2] = -(int64_t{1} << 40) - 3;
  }
  return v;
}

template <typename From, typename To>
void check_convert(const VecProgram& program, const std::string& from_name, int to_code, int n) {
  std::vector<From> in = conversion_inputs<From>(n);
  std::vector<To> out(n + 1, To(123));
  program.fn<void (*)(int, const void*, void*, int64_t)>("convert_" + from_name)(to_code, in.data(),
                                                                                 out.data(), n);
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(bits_of(out[i]), bits_of(static_cast<To>(in[i])))
        << from_name << " -> type " << to_code << " lane " << i << " value " << in[i];
  }
  EXPECT_EQ(out[n], To(123)) << "wrote past the end";
}

template <typename From>
void check_convert_from(const VecProgram& program, const std::string& name, int n) {
  check_convert<From, float>(program, name, kF32, n);
  check_convert<From, double>(program, name, kF64, n);
  check_convert<From, int32_t>(program, name, kI32, n);
  check_convert<From, int64_t>(program, name, kI64, n);
}

TEST_P(KernelVecTest, ConvertKeepsLanesAndMatchesStaticCast) {
  int n = 3 * float_lanes_ + 5;
  check_convert_from<float>(*program_, "f32", n);
  check_convert_from<double>(*program_, "f64", n);
  check_convert_from<int32_t>(*program_, "i32", n);
  check_convert_from<int64_t>(*program_, "i64", n);
}

TEST_P(KernelVecTest, FloatMaskSelectsInt64LanesAndStoresAsBool) {
  int n = 3 * float_lanes_ + 3;
  std::vector<float> a(n), b(n);
  std::vector<int64_t> x(n), y(n), out(n + 1, 77);
  std::unique_ptr<bool[]> mask(new bool[n + 1]);
  mask[n] = true;
  for (int i = 0; i < n; ++i) {
    a[i] = i % 3 == 0 ? NAN : static_cast<float>(i % 5);
    b[i] = 2.0f;
    x[i] = (int64_t{1} << 40) + i;
    y[i] = -i;
  }
  program_->fn<void (*)(const float*, const float*, const int64_t*, const int64_t*, int64_t*, bool*,
                        int64_t)>("where_mixed")(a.data(), b.data(), x.data(), y.data(), out.data(),
                                                 mask.get(), n);
  for (int i = 0; i < n; ++i) {
    bool m = a[i] < b[i];
    EXPECT_EQ(out[i], m ? x[i] : y[i]) << "lane " << i;
    EXPECT_EQ(mask[i], m) << "lane " << i;
  }
  EXPECT_EQ(out[n], 77);
  EXPECT_TRUE(mask[n]);
}

template <typename T>
void check_gather_scatter(const VecProgram& program, const std::string& name, int lanes) {
  using Gather = void (*)(int, const void*, int64_t, const int64_t*, int64_t, void*);
  using Scatter = void (*)(const void*, void*, int64_t, const int64_t*, int64_t);
  const int64_t size = 4 * lanes + 8;
  GuardedBuffer mem(size * sizeof(T));
  T* base = mem.tail<T>(size);
  for (int64_t i = 0; i < size; ++i) base[i] = static_cast<T>(3 * i + 1);
  for (int count = 0; count <= lanes + 1; ++count) {
    SCOPED_TRACE(fmt::format("gather_{} count {}", name, count));
    // Lanes at or past count point past the buffer: reading them would fault.
    std::vector<int64_t> index(lanes);
    for (int i = 0; i < lanes; ++i) index[i] = i < count ? (size - 1 - 2 * i) : size + 4096;
    for (int mode = 0; mode < 3; ++mode) {
      std::vector<T> out(lanes, T(-5));
      int64_t stride = 3;
      const T* from = mode == 0 ? base + size - 1 - stride * (std::min(count, lanes) - 1) : base;
      if (mode == 0 && count == 0) from = base + size;  // nothing may be read
      program.fn<Gather>("gather_" + name)(mode, from, stride, index.data(), count, out.data());
      for (int i = 0; i < lanes; ++i) {
        T want = T(0);
        if (i < count) want = mode == 0 ? from[i * stride] : base[index[i]];
        EXPECT_EQ(out[i], want) << "mode " << mode << " lane " << i;
      }
    }
    // Scatter: lanes < count land, the others leave the target alone.
    std::vector<T> in(lanes), strided(3 * lanes + 1, T(-1)), indexed(2 * lanes + 1, T(-1));
    std::vector<int64_t> target(lanes);
    for (int i = 0; i < lanes; ++i) {
      in[i] = static_cast<T>(i + 10);
      target[i] = 2 * (lanes - 1 - i);
    }
    program.fn<Scatter>("scatter_" + name)(in.data(), strided.data(), 3, nullptr, count);
    program.fn<Scatter>("scatter_" + name)(in.data(), indexed.data(), 0, target.data(), count);
    for (int i = 0; i < lanes; ++i) {
      EXPECT_EQ(strided[3 * i], i < count ? in[i] : T(-1)) << "strided lane " << i;
      EXPECT_EQ(indexed[target[i]], i < count ? in[i] : T(-1)) << "indexed lane " << i;
    }
  }
}

TEST_P(KernelVecTest, GatherAndScatterReadAndWriteOnlyCountLanes) {
  check_gather_scatter<float>(*program_, "f32", float_lanes_);
  check_gather_scatter<double>(*program_, "f64", float_lanes_);
  check_gather_scatter<int32_t>(*program_, "i32", float_lanes_);
  check_gather_scatter<int64_t>(*program_, "i64", float_lanes_);
}

template <typename T>
void check_arange(const VecProgram& program, const std::string& name, int lanes, double base,
                  double step) {
  std::vector<T> out(lanes);
  program.fn<void (*)(double, double, void*)>("arange_" + name)(base, step, out.data());
  for (int i = 0; i < lanes; ++i) {
    T want = static_cast<T>(static_cast<T>(base) + static_cast<T>(i) * static_cast<T>(step));
    EXPECT_EQ(out[i], want) << name << " lane " << i;
  }
}

TEST_P(KernelVecTest, ArangeIsBasePlusLaneTimesStep) {
  check_arange<float>(*program_, "f32", float_lanes_, 2.5, -0.7);
  check_arange<double>(*program_, "f64", float_lanes_, 2.5, -0.7);
  check_arange<int32_t>(*program_, "i32", float_lanes_, 7, -3);
  check_arange<int64_t>(*program_, "i64", float_lanes_, int64_t{1} << 40, 5);
}

// transpose_tile_f32 transposes a lanes x lanes tile: dst[j][i] = src[i][j] for the first rows
// rows and cols columns of src, zero elsewhere in the tile; dst's padding past each row of the
// tile is untouched. src ends at a guard page, so reading past (rows - 1, cols - 1) crashes.
TEST_P(KernelVecTest, TransposeTileMatchesScalarAtEveryTail) {
  using Transpose = void (*)(const float*, int64_t, float*, int64_t, int64_t, int64_t);
  Transpose transpose = program_->fn<Transpose>("transpose_tile_f32");
  const int lanes = float_lanes_;
  const int64_t ss = lanes + 3, ds = lanes + 5;
  const float sentinel = -7.5f;
  for (int rows = 0; rows <= lanes + 1; ++rows) {
    for (int cols = 0; cols <= lanes + 1; ++cols) {
      // rows/cols == lanes + 1 stands for the unmasked form (default arguments).
      const bool full = rows == lanes + 1 || cols == lanes + 1;
      if (full && rows != cols) continue;
      const int r = full ? lanes : rows, c = full ? lanes : cols;
      SCOPED_TRACE(fmt::format("rows {} cols {}{}", r, c, full ? " (unmasked)" : ""));
      const size_t n = r == 0 ? 0 : static_cast<size_t>((r - 1) * ss + c);
      GuardedBuffer src_mem(n * sizeof(float) + 1);
      float* src = src_mem.tail<float>(n);
      for (size_t k = 0; k < n; ++k) src[k] = static_cast<float>(k) + 0.25f;
      std::vector<float> dst(static_cast<size_t>(lanes * ds), sentinel);
      transpose(src, ss, dst.data(), ds, full ? -1 : rows, full ? -1 : cols);
      for (int j = 0; j < lanes; ++j) {
        for (int i = 0; i < ds; ++i) {
          float want = i >= lanes ? sentinel : i < r && j < c ? src[i * ss + j] : 0.0f;
          EXPECT_EQ(dst[j * ds + i], want) << "dst row " << j << " col " << i;
        }
      }
    }
  }
  // In place, as the tile kernel's tails use it.
  std::vector<float> tile(static_cast<size_t>(lanes * lanes));
  for (size_t k = 0; k < tile.size(); ++k) tile[k] = static_cast<float>(k);
  transpose(tile.data(), lanes, tile.data(), lanes, -1, -1);
  for (int j = 0; j < lanes; ++j) {
    for (int i = 0; i < lanes; ++i) {
      EXPECT_EQ(tile[j * lanes + i], static_cast<float>(i * lanes + j)) << j << "," << i;
    }
  }
}

// loadu_stride2 reads lane i from p[2 * i] for i < count and zero beyond, touching only
// p[0] .. p[2 * count - 2]: the source ends there at a guard page (a pooling row's last tap
// may be its buffer's last element).
TEST_P(KernelVecTest, LoadStride2ReadsEveryOtherElementUpToCount) {
  using Load = void (*)(const float*, int64_t, float*);
  Load load = program_->fn<Load>("load_stride2_f32");
  const int lanes = float_lanes_;
  for (int count = -1; count <= lanes + 1; ++count) {
    SCOPED_TRACE(fmt::format("count {}", count));
    const int n = count < 0 ? lanes : std::min(count, lanes);  // lanes read
    const size_t elements = n == 0 ? 0 : static_cast<size_t>(2 * n - 1);
    GuardedBuffer mem(elements * sizeof(float) + 1);
    float* src = mem.tail<float>(elements);
    for (size_t k = 0; k < elements; ++k) src[k] = static_cast<float>(k) * 1.5f - 3.0f;
    std::vector<float> out(static_cast<size_t>(lanes), 99.0f);
    load(src, count, out.data());
    for (int i = 0; i < lanes; ++i) EXPECT_EQ(out[i], i < n ? src[2 * i] : 0.0f) << "lane " << i;
  }
}

TEST_P(KernelVecTest, SelectTakesOneOperandWhole) {
  using Select = void (*)(int, const float*, const float*, float*);
  Select select = program_->fn<Select>("select_f32");
  const int lanes = float_lanes_;
  std::vector<float> a(static_cast<size_t>(lanes)), b(a.size()), out(a.size());
  for (int i = 0; i < lanes; ++i) {
    a[i] = static_cast<float>(i) + 0.5f;
    b[i] = i % 2 ? std::nanf("") : -static_cast<float>(i);
  }
  for (int c : {0, 1}) {
    select(c, a.data(), b.data(), out.data());
    for (int i = 0; i < lanes; ++i)
      EXPECT_EQ(bits_of(out[i]), bits_of(c ? a[i] : b[i])) << "c " << c << " lane " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(KernelVec, KernelVecTest, ::testing::ValuesIn(vec_variants()),
                         variant_name);

}  // namespace
}  // namespace coil::vec_test
