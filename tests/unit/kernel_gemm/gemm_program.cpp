// Compiled at test time, once per ISA variant, by tests/unit/gemm_runtime_test.cpp (through the
// code cache with isa_compile_flags, like tests/unit/kernel_vec/vec_program.cpp): extern "C"
// entry points that pack B and run coil_gemm.h's matmul / matmul_bf16 the way generated
// kernels do, writing C through the epilogue and counting how often each element is written.
// Not part of the test binary itself. coil_vec_gemm.h (which includes coil_gemm.h) comes first:
// the code cache precompiles a source's first header, and parsing coil_gemm.h took 4.7 of 8.5 s.
#include "coil_vec_gemm.h"

#include <omp.h>

#include <cstdint>
#include <cstring>
#include <vector>

using namespace coil;

namespace {

// Mirrors GemmArgs in gemm_runtime_test.cpp.
struct GemmArgs {
  int64_t batch, M, N, K;
  int64_t a_rs, a_cs, a_batch_stride;  // a_batch_stride 0: every batch reads the same A
  int64_t b_rs, b_cs, b_batch_stride;  // b_batch_stride 0: one packed B for all batches
  int64_t mc, nc, kc;                  // 0: choose_blocking
  int32_t threads;                     // omp_set_num_threads for the call
  int32_t mode;  // 0 plain, 1 pack_b_parallel, 2 called inside omp parallel, 3 f32 with A
                 // packed ahead (pack_a_all + matmul_packed_a; needs a_batch_stride 0),
                 // 4 f32 with B as it is (matmul_raw_b), 5 both (A packed ahead, raw B)
};

// Runs one matmul; returns 0, or a nonzero code when an epilogue block is malformed.
template <class T>
int run(const GemmArgs& g, const T* A, const T* B, float* C, int32_t* hits) {
  constexpr bool kBf16 = std::is_same_v<T, bfloat16>;
  gemm::Blocking blk = gemm::choose_blocking(g.M, g.N, g.K, kBf16 ? 2 : 4);
  if (g.mc > 0) blk = {g.mc, g.nc, g.kc};
  int64_t per_b =
      kBf16 ? gemm::packed_b_elements_bf16(g.K, g.N, blk) : gemm::packed_b_elements(g.K, g.N, blk);
  int64_t n_packed = g.b_batch_stride ? g.batch : 1;
  std::vector<T> packed(static_cast<size_t>(n_packed * per_b + 1));
  // NaN bits everywhere first: padding the packers forget to zero poisons the result.
  std::memset(packed.data(), 0xff, packed.size() * sizeof(T));
  for (int64_t b = 0; b < n_packed; ++b) {
    const T* src = B + b * g.b_batch_stride;
    T* dst = packed.data() + b * per_b;
    if constexpr (kBf16) {
      if (g.mode == 1) {
        gemm::pack_b_bf16_parallel(src, g.b_rs, g.b_cs, g.K, g.N, blk, dst);
      } else {
        gemm::pack_b_bf16(src, g.b_rs, g.b_cs, g.K, g.N, blk, dst);
      }
    } else {
      if (g.mode == 1) {
        gemm::pack_b_parallel(src, g.b_rs, g.b_cs, g.K, g.N, blk, dst);
      } else {
        gemm::pack_b(src, g.b_rs, g.b_cs, g.K, g.N, blk, dst);
      }
    }
  }
  std::vector<float> packed_a;
  if (!kBf16 && (g.mode == 3 || g.mode == 5)) {
    if (g.a_batch_stride != 0) return 2;  // one A for every batch only
    packed_a.resize(static_cast<size_t>(gemm::packed_a_elements(g.M, g.K, blk)));
    std::memset(packed_a.data(), 0xff, packed_a.size() * sizeof(float));  // NaN bits
    if constexpr (!kBf16) gemm::pack_a_all(A, g.a_rs, g.a_cs, g.M, g.K, blk, packed_a.data());
  }
  int bad = 0;
  auto call = [&](int64_t batch, int64_t b_base) {
    auto a_of = [&](int64_t b) { return A + (b_base + b) * g.a_batch_stride; };
    auto b_of = [&](int64_t b) {
      return packed.data() + (g.b_batch_stride ? (b_base + b) * per_b : 0);
    };
    auto epilogue = [&](int64_t b, int64_t m0, int64_t m1, int64_t n0, int64_t n1, const float* acc,
                        int64_t ld) {
      if (b < 0 || b >= batch || m0 < 0 || m0 >= m1 || m1 > g.M || n0 < 0 || n0 >= n1 || n1 > g.N ||
          ld < n1 - n0) {
        __atomic_store_n(&bad, 1, __ATOMIC_RELAXED);
        return;
      }
      for (int64_t i = m0; i < m1; ++i) {
        for (int64_t j = n0; j < n1; ++j) {
          int64_t at = ((b_base + b) * g.M + i) * g.N + j;
          C[at] = acc[(i - m0) * ld + (j - n0)];
          __atomic_fetch_add(&hits[at], 1, __ATOMIC_RELAXED);
        }
      }
    };
    if constexpr (kBf16) {
      gemm::matmul_bf16(batch, g.M, g.N, g.K, a_of, g.a_rs, g.a_cs, b_of, blk, epilogue);
    } else if (g.mode == 3) {
      gemm::matmul_packed_a(batch, g.M, g.N, g.K, packed_a.data(), b_of, blk, epilogue);
    } else if (g.mode == 4 || g.mode == 5) {
      auto raw_b = [&](int64_t b) { return B + (b_base + b) * g.b_batch_stride; };
      gemm::matmul_raw_b(batch, g.M, g.N, g.K, g.mode == 5 ? packed_a.data() : nullptr, a_of,
                         g.a_rs, g.a_cs, raw_b, g.b_rs, g.b_cs, blk, epilogue);
    } else {
      gemm::matmul(batch, g.M, g.N, g.K, a_of, g.a_rs, g.a_cs, b_of, blk, epilogue);
    }
  };
  int saved = omp_get_max_threads();
  omp_set_num_threads(g.threads);
  if (g.mode == 2) {
    // One matmul per batch from the threads of an enclosing parallel loop: each runs serially.
#pragma omp parallel for
    for (int64_t b = 0; b < g.batch; ++b) call(1, b);
  } else {
    call(g.batch, 0);
  }
  omp_set_num_threads(saved);
  return bad;
}

}  // namespace

extern "C" {

// 0: kMR, 1: kNR, 2: whether bf16 runs natively (vdpbf16ps or AMX), 3: the bf16 packed-B
// elements of a 3 x 5 B, 4: kLanes, 5: whether bf16 runs on AMX, 6 / 7: the bf16 micro-tile.
int64_t gemm_info(int what) {
  if (what == 0) return gemm::kMR;
  if (what == 1) return gemm::kNR;
  if (what == 2) return gemm::kNativeBf16;
  if (what == 3) return gemm::packed_b_elements_bf16(3, 5, gemm::choose_blocking(1, 5, 3, 2));
  if (what == 4) return gemm::kLanes;
  if (what == 5) return gemm::kAmxBf16;
  if (what == 6) return gemm::kMRBf16;
  if (what == 7) return gemm::kNRBf16;
  return -1;
}

int gemm_f32(const GemmArgs* g, const float* A, const float* B, float* C, int32_t* hits) {
  return run<float>(*g, A, B, C, hits);
}

int gemm_bf16(const GemmArgs* g, const bfloat16* A, const bfloat16* B, float* C, int32_t* hits) {
  return run<bfloat16>(*g, A, B, C, hits);
}

// choose_blocking's answer, for the test to check its invariants.
void gemm_blocking(int64_t M, int64_t N, int64_t K, int element_bytes, int64_t* out) {
  gemm::Blocking blk = gemm::choose_blocking(M, N, K, element_bytes);
  out[0] = blk.mc;
  out[1] = blk.nc;
  out[2] = blk.kc;
}

}  // extern "C"
