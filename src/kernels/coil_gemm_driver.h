// The loops of coil_gemm.h around the micro-kernels: thread split, cache blocks, A packing,
// per-thread scratch, the epilogue call. Included by coil_gemm.h only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>
#include <stdexcept>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "coil_gemm_kernels.h"
#include "coil_types.h"

namespace coil::gemm::detail {
inline namespace COIL_GEMM_ABI {

/// A non-owning reference to a callable, so that run_matmul is compiled once per element path
/// in a module rather than once per call site's lambdas: a module with five matmuls compiled
/// its loops five times (the demo's g++ time was mostly that). The callables run once per block
/// (A and B lookups) or once per finished block (the epilogue), so the indirect call is free.
template <class Sig>
class FunctionRef;
template <class R, class... Args>
class FunctionRef<R(Args...)> {
 public:
  template <class F>
  FunctionRef(F& f)  // NOLINT(google-explicit-constructor): a parameter type
      : obj_(static_cast<void*>(&f)),
        call_([](void* o, Args... args) -> R { return (*static_cast<F*>(o))(args...); }) {}
  R operator()(Args... args) const { return call_(obj_, args...); }

 private:
  void* obj_;
  R (*call_)(void*, Args...);
};

using EpilogueRef = FunctionRef<void(int64_t, int64_t, int64_t, int64_t, int64_t, float*, int64_t)>;

// Per-core data caches of the target (Zen4 EPYC: 32 KiB L1d, 1 MiB L2; most x86 server cores
// since Skylake-SP have 32-48 KiB / 1-2 MiB). A wrong guess costs speed, never correctness.
constexpr int64_t kL1Bytes = 32 * 1024;
constexpr int64_t kL2Bytes = 1024 * 1024;

// Below this many flops (2 * batch * M * N * K, ~4 us on one AVX-512 core) a call runs on the
// calling thread alone. Measured on 2 Zen4 cores with a warm OpenMP team: at 0.26 MFLOP
// (32 x 64 x 64) two threads are 20% slower than one, at 0.52 MFLOP (64^3, 1 x 512 x 512,
// 32 x 64 x 128) 10-50% faster.
#ifndef COIL_GEMM_PARALLEL_MIN_FLOPS
#define COIL_GEMM_PARALLEL_MIN_FLOPS 4.0e5
#endif
constexpr double kParallelMinFlops = COIL_GEMM_PARALLEL_MIN_FLOPS;

// Packed A kept for reuse across column blocks (see run_matmul) takes at most this much per
// thread: 272 rows x K = 2048 f32 is 2.1 MiB; beyond it (huge K) A is re-packed per block.
constexpr int64_t kKeepPackedABytes = 4 << 20;

// A B packed per call (an activation: a 1x1 convolution's x in W @ x) is packed by the threads
// that read it, each its own column panels into its own buffer (run_matmul's local B), while
// one thread's panels take at most this much; beyond it B is packed whole before the threads
// start, as a constant B is at load. Packed by the calling thread and read by every other,
// the panels crossed cores dirty: mobilenet_v2's 7x7-stage projects ran no faster on two
// threads than on one (960 -> 160 at 49 pixels: pack 10 us and product 55 us apart, 108 us
// together; 2026-12-07, AMD EPYC Zen 5).
constexpr int64_t kLocalBBytes = 2 << 20;

/// A B given as it is: batch b's element (k, n) at of(b)[k * rs + n * cs].
struct RawB {
  FunctionRef<const float*(int64_t)> of;
  int64_t rs, cs;
};

// The scratch below has internal linkage (an unnamed namespace): each shared object that
// compiles these loops (a generated module whose ISA has no precompiled copy in
// libcoil_vmath, e.g. scalar) owns its pool and per-thread slots. With external linkage the
// dynamic linker bound every module's inline statics to one copy across modules: a module's
// unload freed buffers another module's slot still pointed to (wrong products, then heap
// corruption, in the correctness tests run at COIL_CPU_ISA=scalar).
namespace {

// Every scratch buffer of this module (one shared object per graph), freed when the module is
// unloaded or the process exits: the pool is a function-local static, destroyed at dlclose.
struct ScratchPool {
  std::mutex mutex;
  std::vector<void*> buffers;
  ~ScratchPool() {
    for (void* p : buffers) std::free(p);
  }
};

inline ScratchPool& scratch_pool() {
  static ScratchPool pool;
  return pool;
}

// The calling thread's scratch, at least `bytes`, 64-byte aligned. Allocated on first use and
// grown (never shrunk) when a call needs more, so steady-state calls do not allocate. The
// thread_local slot is plain data (no TLS destructor, which would pin the module in memory);
// the pool owns the memory.
// Slot 0: run_matmul's accumulator block and packed A; slot 1: B packed per call by the
// template kernels (packed_b_scratch in coil_gemm.h).
template <int Slot>
inline void* thread_scratch_slot(int64_t bytes) {
  thread_local void* buf = nullptr;
  thread_local int64_t cap = 0;
  if (cap < bytes) {
    ScratchPool& pool = scratch_pool();
    std::lock_guard<std::mutex> lock(pool.mutex);
    if (buf) {
      pool.buffers.erase(std::find(pool.buffers.begin(), pool.buffers.end(), buf));
      std::free(buf);
    }
    cap = round_up(std::max<int64_t>(bytes, 4096), 4096);
    buf = std::aligned_alloc(64, static_cast<size_t>(cap));
    if (!buf) {
      cap = 0;
      throw std::bad_alloc();  // inside the parallel region this terminates, like any OOM there
    }
    pool.buffers.push_back(buf);
  }
  return buf;
}

inline void* thread_scratch(int64_t bytes) {
  return thread_scratch_slot<0>(bytes);
}

}  // namespace

// How one input type reaches a micro-kernel: the A element, the packed A and B element types,
// the micro-tile (kTileM rows of A per panel, kTileN columns per B panel, the last panel
// rounded to kTileLanes), the packed B addressing, the packing/kernel functions, and hooks
// around the call (prepare: once, on the calling thread) and around each thread's share.
struct PathHooks {
  static void prepare() {}
  static void thread_begin() {}
  static void thread_end() {}
};

template <class T>
struct PathF32 : PathHooks {
  using AElem = T;
  using BElem = std::conditional_t<std::is_same_v<T, float>, float, bfloat16>;
  using PackedA = float;
  using PackedB = float;
  static constexpr int kTileM = kMR, kTileN = kNR, kTileLanes = kLanes;
  static constexpr int kKStep = 1;
  static int64_t b_panel_stride(int64_t K) { return K * kNR; }
  static int64_t a_panel_elements(int64_t kc) { return kc * kMR; }
  static void pack_a(const T* a, int64_t rs, int64_t cs, int rows, int64_t kc, float* out) {
    pack_a_panel_f32(a, rs, cs, rows, kc, out);
  }
  static void kernel(int rows, int nv, int64_t kc, const float* a, const float* b, float* c,
                     int64_t ldc, bool accumulate) {
    ukernel_f32_tile(rows, nv, kc, a, b, c, ldc, accumulate);
  }
};

#if COIL_GEMM_HAS_BF16_KERNEL
struct PathBf16 : PathHooks {
  using AElem = bfloat16;
  using BElem = bfloat16;
  using PackedA = uint32_t;  // a (k, k + 1) pair
  using PackedB = uint16_t;
  static constexpr int kTileM = kMR, kTileN = kNR, kTileLanes = kLanes;
  static constexpr int kKStep = 2;
  static int64_t b_panel_stride(int64_t K) { return round_up(K, 2) * kNR; }
  static int64_t a_panel_elements(int64_t kc) { return ceil_div(kc, 2) * kMR; }
  static void pack_a(const bfloat16* a, int64_t rs, int64_t cs, int rows, int64_t kc,
                     uint32_t* out) {
    pack_a_panel_bf16_pairs(a, rs, cs, rows, kc, out);
  }
  static void kernel(int rows, int nv, int64_t kc, const uint32_t* a, const uint16_t* b, float* c,
                     int64_t ldc, bool accumulate) {
    ukernel_bf16_tile(rows, nv, ceil_div(kc, 2), a, b, c, ldc, accumulate);
  }
};
#endif

#if COIL_GEMM_HAS_AMX_KERNEL
// bf16 on AMX tiles (coil_gemm_kernels.h). K slices are whole steps of 32 (kKStep), so every
// element of C is the same sequence of TDPBF16PS (same pair groups, increasing k) whatever the
// blocking and the thread count: results stay bitwise identical for 1 and N threads.
struct PathAmx {
  using AElem = bfloat16;
  using BElem = bfloat16;
  using PackedA = uint16_t;
  using PackedB = uint16_t;
  static constexpr int kTileM = kAmxMR, kTileN = kAmxNR, kTileLanes = amx::kRows;
  static constexpr int kKStep = kAmxKStep;
  static int64_t b_panel_stride(int64_t K) { return round_up(K, kAmxKStep) * kAmxNR; }
  static int64_t a_panel_elements(int64_t kc) { return round_up(kc, kAmxKStep) * kAmxMR; }
  static void pack_a(const bfloat16* a, int64_t rs, int64_t cs, int rows, int64_t kc,
                     uint16_t* out) {
    pack_a_panel_amx(a, rs, cs, rows, kc, out);
  }
  static void kernel(int rows, int nv, int64_t kc, const uint16_t* a, const uint16_t* b, float* c,
                     int64_t ldc, bool accumulate) {
    ukernel_amx_tile(rows, nv, ceil_div(kc, kAmxKStep), a, b, c, ldc, accumulate);
  }
  // Linux grants tile data per process on request; the ISA table asks when it detects AMX, this
  // covers modules loaded by other programs (an exported model's runner).
  static void prepare() {
    if (!amx::request_permission()) {
      throw std::runtime_error(
          "coil matmul_bf16 (AMX): the kernel refused tile data permission "
          "(arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)); rebuild the model with "
          "COIL_CPU_ISA=avx512 to use the AVX512-BF16 kernel");
    }
  }
  // The tile configuration is per thread (like the tile registers): each thread loads it before
  // its share and releases the tiles after.
  static void thread_begin() {
    static const amx::TileConfig config = amx::full_config();
    amx::load_config(config);
  }
  static void thread_end() { amx::release(); }
};
#endif

// The thread grid: tn threads across the column panels, nthr / tn across the row units
// (batch x row panels). Picks the split with the smallest estimated time of the largest share:
// rows x columns of it (true widths: the last panel may be narrow) times 1 + overhead, where
// the overhead estimates, relative to the FMAs, streaming B from beyond L2 (2 / rows bytes
// per flop when B does not fit in half of L2) and packing A (~4 / columns). E.g. M = 64,
// N = 4096 on 2 threads splits N (each thread streams half of B: 0.90 -> 0.95 of oneDNN's
// speed), while M = 64, N = 256 and square problems split M. Ties go to splitting M.
template <int MR, int NR, int Lanes>
inline int choose_tn(int nthr, int64_t M, int64_t N, int64_t K, int64_t row_units,
                     int64_t col_panels) {
  const int64_t n_pad = (col_panels - 1) * NR + panel_width_of<NR, Lanes>(col_panels - 1, N);
  const bool b_in_l2 = K * N * 4 <= kL2Bytes / 2;
  int best_tn = 1;
  double best = -1;
  for (int tn = 1; tn <= nthr; ++tn) {
    if (nthr % tn) continue;
    int64_t cols = 0;
    for (int g = 0; g < tn; ++g) {
      const int64_t q0 = col_panels * g / tn, q1 = col_panels * (g + 1) / tn;
      cols = std::max(cols, std::min(q1 * NR, n_pad) - q0 * NR);
    }
    const int64_t rows = ceil_div(row_units, nthr / tn) * MR;
    const double rows_per_b = static_cast<double>(std::min(rows, round_up(M, MR)));
    const double overhead = (b_in_l2 ? 0.0 : 2.0 / rows_per_b) + 4.0 / static_cast<double>(cols);
    const double cost = static_cast<double>(rows) * static_cast<double>(cols) * (1.0 + overhead);
    if (best < 0 || cost < best * (1 - 1e-9)) {
      best = cost;
      best_tn = tn;
    }
  }
  return best_tn;
}

// a_packed: null, or every row panel of A over all of K as pack_a_all wrote it (the same A
// for every batch; a constant weight packed when the module is loaded), read in place instead
// of packing A per call.
//
// raw_b: null (b_of gives each batch's packed B), or B as it is (PathF32<float> only), packed
// by run_matmul: into each thread's buffer, the panels the thread computes, when that share
// is at most kLocalBBytes (b_of unused); else whole, before the threads start (b_of unused).
// Either way the packed panels are pack_b's, so the products are bit for bit the same.
template <class P>
void run_matmul(int64_t batch, int64_t M, int64_t N, int64_t K,
                FunctionRef<const typename P::AElem*(int64_t)> a_of, int64_t a_rs, int64_t a_cs,
                const void* a_packed, FunctionRef<const void*(int64_t)> b_of, int64_t mc,
                int64_t nc, int64_t kc, EpilogueRef epilogue, const RawB* raw_b) {
  using PackedA = typename P::PackedA;
  using PackedB = typename P::PackedB;
  constexpr int kMR = P::kTileM, kNR = P::kTileN, kLanes = P::kTileLanes;  // this path's tile
  if (batch <= 0 || M <= 0 || N <= 0) return;
  P::prepare();
  const int64_t mcp = std::max<int64_t>(1, mc / kMR);  // row panels per block
  const int64_t ncp = std::max<int64_t>(1, nc / kNR);  // column panels per block
  kc = round_up(std::max<int64_t>(kc, 1), P::kKStep);
  const int64_t Pm = ceil_div(M, kMR), Pn = ceil_div(N, kNR), R = batch * Pm;
  const int64_t b_stride = P::b_panel_stride(K), last_w = panel_width_of<kNR, kLanes>(Pn - 1, N);

  int nthr = 1;
#ifdef _OPENMP
  if (!omp_in_parallel() && 2.0 * batch * M * N * std::max<int64_t>(K, 1) >= kParallelMinFlops) {
    nthr = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), R * Pn));
  }
#endif
  // A raw B: each thread's own panels when they fit kLocalBBytes, else packed whole here.
  bool local_b = false;
  const float* whole_b = nullptr;  // raw B packed here: batch b's panels at b * whole_b_stride
  int64_t whole_b_stride = 0;
  if constexpr (!std::is_same_v<typename P::PackedB, float>) {
    if (raw_b) throw std::logic_error("run_matmul: a raw B is packed as f32 panels only");
  } else if (raw_b) {
    const int tn = choose_tn<kMR, kNR, kLanes>(nthr, M, N, K, R, Pn);
    local_b = ceil_div(Pn, tn) * b_stride * int64_t{sizeof(float)} <= kLocalBBytes;
    if (!local_b) {
      const bool same = [&] {
        for (int64_t b = 1; b < batch; ++b)
          if (raw_b->of(b) != raw_b->of(0)) return false;
        return true;
      }();
      const int64_t copies = same ? 1 : batch;
      whole_b_stride = same ? 0 : Pn * b_stride;
      auto* dst = static_cast<float*>(
          thread_scratch_slot<1>(copies * Pn * b_stride * int64_t{sizeof(float)}));
#pragma omp parallel for schedule(static) if (K * N >= (int64_t{1} << 16) && !omp_in_parallel())
      for (int64_t i = 0; i < copies * Pn; ++i) {
        const int64_t b = i / Pn, q = i % Pn;
        pack_b_panels_f32(raw_b->of(b), raw_b->rs, raw_b->cs, K, N, q, q + 1,
                          dst + b * Pn * b_stride + q * b_stride);
      }
      whole_b = dst;
    }
  }

  auto work = [&](int tid, int nthr) {
    const int tn = choose_tn<kMR, kNR, kLanes>(nthr, M, N, K, R, Pn), tm = nthr / tn;
    const int im = tid / tn, in = tid % tn;
    const int64_t r0 = R * im / tm, r1 = R * (im + 1) / tm;
    const int64_t q0 = Pn * in / tn, q1 = Pn * (in + 1) / tn;
    if (r0 >= r1 || q0 >= q1) return;
    // The thread's own packed panels q0..q1 of the last batch's raw B (local_b), packed when
    // the batch's B changes; its panel q at (q - q0) * b_stride.
    float* own_b = local_b ? static_cast<float*>(thread_scratch_slot<1>((q1 - q0) * b_stride *
                                                                        int64_t{sizeof(float)}))
                           : nullptr;
    const float* own_src = nullptr;
    // When the thread's columns span several blocks, a block row's A is packed once (all of
    // K) and reused by each column block, unless that would take more than kKeepPackedABytes.
    const int64_t panel_k = P::a_panel_elements(std::max<int64_t>(K, 1));  // one panel, all K
    const auto* prepacked = static_cast<const PackedA*>(a_packed);
    const bool keep_a =
        !prepacked && q1 - q0 > ncp &&
        std::min(mcp, r1 - r0) * panel_k * int64_t{sizeof(PackedA)} <= kKeepPackedABytes;
    const int64_t acc_floats =
        round_up(std::min(mcp, r1 - r0) * kMR * std::min(ncp, q1 - q0) * kNR, 16);
    const int64_t pa_elems = prepacked ? 0
                             : keep_a  ? std::min(mcp, r1 - r0) * panel_k
                                       : P::a_panel_elements(std::min(kc, std::max<int64_t>(K, 1)));
    auto* acc =
        static_cast<float*>(thread_scratch(acc_floats * 4 + pa_elems * int64_t{sizeof(PackedA)}));
    auto* pa = reinterpret_cast<PackedA*>(acc + acc_floats);
    P::thread_begin();

    for (int64_t r = r0; r < r1;) {
      const int64_t b = r / Pm, p0 = r % Pm;
      const int64_t p1 = std::min({p0 + mcp, Pm, p0 + (r1 - r)});
      r += p1 - p0;
      const int64_t m0 = p0 * kMR, m1 = std::min(M, p1 * kMR);
      const typename P::AElem* a = prepacked ? nullptr : a_of(b);
      // bp: panel q of this batch's packed B at bp + (q - q_base) * b_stride
      const PackedB* bp;
      int64_t q_base = 0;
      if (local_b) {
        const float* src = raw_b->of(b);
        if (src != own_src) {
          pack_b_panels_f32(src, raw_b->rs, raw_b->cs, K, N, q0, q1, own_b);
          own_src = src;
        }
        bp = reinterpret_cast<const PackedB*>(own_b);
        q_base = q0;
      } else if (whole_b) {
        bp = reinterpret_cast<const PackedB*>(whole_b + b * whole_b_stride);
      } else {
        bp = reinterpret_cast<const PackedB*>(b_of(b));
      }
      for (int64_t qb = q0; qb < q1; qb += ncp) {
        const int64_t qe = std::min(qb + ncp, q1);
        const int64_t n0 = qb * kNR, n1 = std::min(N, qe * kNR), ld = (qe - qb) * kNR;
        const bool pack = !keep_a || qb == q0;
        if (K <= 0) std::fill(acc, acc + (m1 - m0) * ld, 0.0f);
        for (int64_t pc = 0; pc < K; pc += kc) {
          const int64_t kcur = std::min(kc, K - pc);
          for (int64_t p = p0; p < p1; ++p) {
            const int rows = static_cast<int>(std::min<int64_t>(kMR, M - p * kMR));
            // Kept: panel p's slice pc at (p - p0) * panel_k + a_panel_elements(pc); packed
            // ahead: at p * panel_k + a_panel_elements(pc).
            const PackedA* pan = prepacked ? prepacked + p * panel_k + P::a_panel_elements(pc)
                                 : keep_a  ? pa + (p - p0) * panel_k + P::a_panel_elements(pc)
                                           : pa;
            if (pack && !prepacked) {
              PackedA* dst = const_cast<PackedA*>(pan);
              P::pack_a(a + p * kMR * a_rs + pc * a_cs, a_rs, a_cs, rows, kcur, dst);
              if (p + 1 < p1) {
                prefetch_a_panel(a + (p + 1) * kMR * a_rs + pc * a_cs, a_rs, a_cs,
                                 static_cast<int>(std::min<int64_t>(kMR, M - (p + 1) * kMR)), kcur);
              }
            }
            float* crow = acc + (p - p0) * kMR * ld;
            // Panel q of width w holds slice pc at pc * w (for bf16 pairs too: pc is even).
            for (int64_t q = qb; q < qe; ++q) {
              const int64_t w = q == Pn - 1 ? last_w : kNR;
              P::kernel(rows, static_cast<int>(w / kLanes), kcur, pan,
                        bp + (q - q_base) * b_stride + pc * w, crow + (q - qb) * kNR, ld, pc > 0);
            }
          }
        }
        epilogue(b, m0, m1, n0, n1, acc, ld);
      }
    }
    P::thread_end();
  };

  if (nthr <= 1) {
    work(0, 1);
    return;
  }
#ifdef _OPENMP
#pragma omp parallel num_threads(nthr)
  work(omp_get_thread_num(), omp_get_num_threads());
#endif
}

#if defined(COIL_GEMM_PRECOMPILED) && !defined(COIL_AMX_EMULATE)
// (A module on emulated AMX tiles, COIL_TESTING_AMX_EMULATE, compiles its own: libcoil_vmath
// has no emulated copy.)
// Generated modules of the AVX-512/AVX2 ISAs link these from libcoil_vmath
// (src/kernels/vmath/gemm_*.cpp, built with the same ISA macros) instead of compiling the
// blocking loops and micro-kernels again: 0.4-1 s of g++ per module with a matmul.
#define COIL_GEMM_DECLARE_RUN(P)                                                              \
  extern template void run_matmul<P>(int64_t, int64_t, int64_t, int64_t,                      \
                                     FunctionRef<const typename P::AElem*(int64_t)>, int64_t, \
                                     int64_t, const void*, FunctionRef<const void*(int64_t)>, \
                                     int64_t, int64_t, int64_t, EpilogueRef, const RawB*);
COIL_GEMM_DECLARE_RUN(PathF32<float>)
COIL_GEMM_DECLARE_RUN(PathF32<bfloat16>)
#if COIL_GEMM_HAS_BF16_KERNEL
COIL_GEMM_DECLARE_RUN(PathBf16)
#endif
#if COIL_GEMM_HAS_AMX_KERNEL
COIL_GEMM_DECLARE_RUN(PathAmx)
#endif
#undef COIL_GEMM_DECLARE_RUN
#endif

}  // namespace COIL_GEMM_ABI
}  // namespace coil::gemm::detail
