// GpuExportedModel (coil/runtime.h): a GPU model exported by `coil export MODEL --device cuda`
// (python/coil_runtime/aot.py writes it), run with the CUDA driver API alone: the cubins loaded
// with cuModuleLoadData, every buffer allocated once, the graph's constants uploaded once, and a
// call a fixed sequence of cuLaunchKernel, cuBLAS products and cuDNN convolutions with arguments
// prepared at load (only those that point at caller memory change per call), or, with
// GpuLoadOptions::cuda_graph, that sequence captured once as a CUDA graph and replayed with one
// cuGraphLaunch. No Python, torch, Triton or CUDA toolkit.
#include <algorithm>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "coil/runtime.h"
#include "runtime/artifact.h"
#include "runtime/cuda_driver.h"
#include "runtime/gpu_conv.h"
#include "runtime/model_runner.h"
#include "support/check.h"

namespace coil {
namespace {

namespace fs = std::filesystem;
using cuda::CUdeviceptr;
using nlohmann::json;

constexpr const char* kGpuFormat = "coil-gpu-export-v1";

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  COIL_USER_CHECK(in.good(), "cannot read {}", path.string());
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Buffer {
  enum class Kind { input, output, constant, temp } kind = Kind::temp;
  int index = -1;      // inputs and outputs: their position
  int64_t bytes = 0;   // allocation size
  int64_t offset = 0;  // constants: their offset in weights.bin
  CUdeviceptr owned = 0;
};

struct Kernel {
  std::string name;
  cuda::CUmodule module = nullptr;
  cuda::CUfunction function = nullptr;
  unsigned block = 0, shared = 0;
};

// One argument slot of a launch: 8 bytes holding the value cuLaunchKernel reads.
struct Slot {
  uint64_t bits = 0;
  int buffer = -1;  // an address: buffers[buffer] + offset
  int64_t offset = 0;
};

// A plain product through cuBLAS: out = a @ b, row-major views of buffers (element strides),
// batched with one stride each. cuBLAS is column-major: C^T = B^T A^T, an operand whose rows
// are contiguous is its own transpose there.
struct GemmOperand {
  int buffer = -1;
  int64_t offset = 0, rows = 0, cols = 0, row_stride = 0, col_stride = 0, batch = 1,
          batch_stride = 0;
};
struct Gemm {
  GemmOperand a, b, out;
  int dtype = cuda::kCudaR32F;          // of a, b and out: f32 (cublasSgemm), bf16, f16 (GemmEx)
  int math = cuda::kCublasDefaultMath;  // the cuBLAS math mode torch had (TF32, reductions)
};

enum class Step { kernel, gemm, conv };

struct Launch {
  Step step = Step::kernel;
  int kernel = -1;  // a Triton kernel
  Gemm gemm;
  int conv = -1;  // into Impl::convs
  unsigned grid[3] = {1, 1, 1};
  std::vector<Slot> slots;    // the kernel's arguments, then the two scratch pointers
  std::vector<void*> params;  // &slots[i].bits
};

}  // namespace

struct GpuExportedModel::Impl {
  std::vector<ValueSpec> inputs, outputs;
  std::vector<Buffer> buffers;
  std::vector<Kernel> kernels;
  mutable std::vector<Launch> launches;
  std::vector<int> input_buffer, output_buffer;  // position -> buffer
  std::string device;
  cuda::CublasHandle blas = nullptr;  // models with plain products
  cuda::CudnnHandle dnn = nullptr;    // models with convolutions
  std::vector<gpu::Conv> convs;
  CUdeviceptr workspace = 0;  // cuDNN's, the largest any convolution needs
  size_t workspace_bytes = 0;
  // CUDA graphs (GpuLoadOptions::cuda_graph): the model's stream, on which the whole launch
  // sequence was captured once, and the instantiated graph.
  cuda::CUstream stream = nullptr;
  cuda::CUgraph graph = nullptr;
  cuda::CUgraphExec graph_exec = nullptr;
  mutable std::mutex mutex;  // the launches' argument slots are shared by calls
  mutable void* blas_stream = reinterpret_cast<void*>(-1);  // the stream cuBLAS was last given

  bool live = false;  // the driver loaded: there is something to free

  ~Impl() {
    if (!live) return;
    const cuda::Driver& d = cuda::driver();
    if (graph_exec) d.cuGraphExecDestroy(graph_exec);
    if (graph) d.cuGraphDestroy(graph);
    if (stream) {
      d.cuStreamSynchronize(stream);
      d.cuStreamDestroy(stream);
    }
    if (dnn) {
      const cuda::Dnn& n = cuda::dnn();
      for (gpu::Conv& c : convs) gpu::destroy_conv(c);
      if (dnn) n.cudnnDestroy(dnn);
    }
    if (workspace) d.cuMemFree(workspace);
    for (Buffer& b : buffers)
      if (b.owned) d.cuMemFree(b.owned);
    for (Kernel& k : kernels)
      if (k.module) d.cuModuleUnload(k.module);
  }

  // Points every slot at its buffer: owned memory, or the caller's for inputs and outputs.
  void bind(const std::vector<CUdeviceptr>& in, const std::vector<CUdeviceptr>& out) const {
    auto base = [&](int b) {
      const Buffer& buf = buffers[static_cast<size_t>(b)];
      if (buf.kind == Buffer::Kind::input && !in.empty()) return in[static_cast<size_t>(buf.index)];
      if (buf.kind == Buffer::Kind::output && !out.empty())
        return out[static_cast<size_t>(buf.index)];
      return buf.owned;
    };
    for (Launch& l : launches)
      for (Slot& s : l.slots)
        if (s.buffer >= 0) s.bits = base(s.buffer) + static_cast<uint64_t>(s.offset);
  }

  CUdeviceptr address(int buffer, int64_t byte_offset, const std::vector<CUdeviceptr>& in,
                      const std::vector<CUdeviceptr>& out) const {
    const Buffer& buf = buffers[static_cast<size_t>(buffer)];
    CUdeviceptr base = buf.owned;
    if (buf.kind == Buffer::Kind::input && !in.empty()) base = in[static_cast<size_t>(buf.index)];
    if (buf.kind == Buffer::Kind::output && !out.empty())
      base = out[static_cast<size_t>(buf.index)];
    return base + static_cast<uint64_t>(byte_offset);
  }

  void run_gemm(const Gemm& g, void* stream, const std::vector<CUdeviceptr>& in,
                const std::vector<CUdeviceptr>& out) const {
    const cuda::Blas& b = cuda::blas();
    auto as_col_major = [](const GemmOperand& o, int* op, int* ld) {
      // rows contiguous (col_stride 1): its memory is the column-major transpose, op N;
      // columns contiguous: the matrix itself, op T.
      if (o.col_stride == 1 || o.cols == 1) {
        *op = 0;
        *ld = static_cast<int>(std::max<int64_t>(o.row_stride, std::max<int64_t>(o.cols, 1)));
      } else {
        *op = 1;
        *ld = static_cast<int>(std::max<int64_t>(o.col_stride, std::max<int64_t>(o.rows, 1)));
      }
    };
    int op_a = 0, lda = 0, op_b = 0, ldb = 0, op_c = 0, ldc = 0;
    as_col_major(g.a, &op_a, &lda);
    as_col_major(g.b, &op_b, &ldb);
    as_col_major(g.out, &op_c, &ldc);
    const int m = static_cast<int>(g.out.rows), n = static_cast<int>(g.out.cols),
              k = static_cast<int>(g.a.cols);
    const float one = 1, zero = 0;
    // The manifest's offsets of products count bytes (as the kernels' arguments).
    auto ptr = [&](const GemmOperand& o) {
      return reinterpret_cast<float*>(static_cast<uintptr_t>(address(o.buffer, o.offset, in, out)));
    };
    if (blas_stream != stream) {
      // Only on a change: cublasSetStream resets cuBLAS's workspace to its default pool, which
      // must not happen inside a graph capture.
      b.cublasSetStream(blas, stream);
      blas_stream = stream;
    }
    int status = b.cublasSetMathMode(blas, g.math);
    COIL_USER_CHECK(status == 0, "cublasSetMathMode({}): status {}", g.math, status);
    if (g.dtype != cuda::kCudaR32F) {
      // bf16 / f16 as torch's gemm_internal_cublas: GemmEx with fp32 compute and alpha/beta.
      const int t = g.dtype;
      if (g.out.batch <= 1) {
        status = b.cublasGemmEx(blas, op_b, op_a, n, m, k, &one, ptr(g.b), t, ldb, ptr(g.a), t, lda,
                                &zero, ptr(g.out), t, ldc, cuda::kCublasCompute32F,
                                cuda::kCublasGemmDefaultTensorOp);
      } else {
        status = b.cublasGemmStridedBatchedEx(
            blas, op_b, op_a, n, m, k, &one, ptr(g.b), t, ldb, g.b.batch > 1 ? g.b.batch_stride : 0,
            ptr(g.a), t, lda, g.a.batch > 1 ? g.a.batch_stride : 0, &zero, ptr(g.out), t, ldc,
            g.out.batch_stride, static_cast<int>(g.out.batch), cuda::kCublasCompute32F,
            cuda::kCublasGemmDefaultTensorOp);
      }
      COIL_USER_CHECK(status == 0, "cuBLAS GemmEx {}x{}x{} (batch {}, data type {}): status {}", m,
                      n, k, g.out.batch, t, status);
      return;
    }
    if (g.out.batch <= 1) {
      status = b.cublasSgemm(blas, op_b, op_a, n, m, k, &one, ptr(g.b), ldb, ptr(g.a), lda, &zero,
                             ptr(g.out), ldc);
    } else {
      status = b.cublasSgemmStridedBatched(blas, op_b, op_a, n, m, k, &one, ptr(g.b), ldb,
                                           g.b.batch > 1 ? g.b.batch_stride : 0, ptr(g.a), lda,
                                           g.a.batch > 1 ? g.a.batch_stride : 0, &zero, ptr(g.out),
                                           ldc, g.out.batch_stride, static_cast<int>(g.out.batch));
    }
    COIL_USER_CHECK(status == 0, "cuBLAS SGEMM {}x{}x{} (batch {}): status {}", m, n, k,
                    g.out.batch, status);
  }

  void run_conv(const gpu::Conv& c, void* stream, const std::vector<CUdeviceptr>& in,
                const std::vector<CUdeviceptr>& out) const {
    const cuda::Dnn& n = cuda::dnn();
    auto ptr = [&](const gpu::ConvRef& r) {
      return reinterpret_cast<void*>(static_cast<uintptr_t>(address(r.buffer, r.offset, in, out)));
    };
    const float one = 1, zero = 0;  // float for f32, f16 and bf16 data (cuDNN's scaling rule)
    cuda::check_dnn(n.cudnnSetStream(dnn, stream), "cudnnSetStream");
    cuda::check_dnn(n.cudnnConvolutionForward(
                        dnn, &one, c.x_desc, ptr(c.x), c.w_desc, ptr(c.w), c.conv_desc, c.algo,
                        reinterpret_cast<void*>(static_cast<uintptr_t>(workspace)), c.workspace,
                        &zero, c.y_desc, ptr(c.out)),
                    "cudnnConvolutionForward");
    if (c.bias.buffer >= 0)
      cuda::check_dnn(
          n.cudnnAddTensor(dnn, &one, c.bias_desc, ptr(c.bias), &one, c.y_desc, ptr(c.out)),
          "cudnnAddTensor (the convolution's bias)");
  }

  void launch_all(void* stream, const std::vector<CUdeviceptr>& in = {},
                  const std::vector<CUdeviceptr>& out = {}) const {
    const cuda::Driver& d = cuda::driver();
    for (Launch& l : launches) {
      if (l.step == Step::gemm) {
        run_gemm(l.gemm, stream, in, out);
        continue;
      }
      if (l.step == Step::conv) {
        run_conv(convs[static_cast<size_t>(l.conv)], stream, in, out);
        continue;
      }
      const Kernel& k = kernels[static_cast<size_t>(l.kernel)];
      cuda::check(d.cuLaunchKernel(k.function, l.grid[0], l.grid[1], l.grid[2], k.block, 1, 1,
                                   k.shared, stream, l.params.data(), nullptr),
                  "launch " + k.name);
    }
  }

  /// GpuLoadOptions::cuda_graph: one call on the model's own buffers and stream (cuBLAS and
  /// cuDNN set up, lazily loaded kernels loaded: nothing of that may happen while capturing),
  /// then the same sequence captured on that stream and instantiated. The graph reads and
  /// writes the model's own buffers only; callers' data is copied in and out around it.
  void capture() {
    const cuda::Driver& d = cuda::require_graphs();
    cuda::check(d.cuStreamCreate(&stream, cuda::kStreamDefault), "cuStreamCreate");
    // The warm-up reads the inputs: zeros, never an index out of bounds.
    for (const Buffer& b : buffers)
      if (b.kind == Buffer::Kind::input && b.bytes > 0) {
        std::vector<char> zeros(static_cast<size_t>(b.bytes));
        cuda::check(d.cuMemcpyHtoD(b.owned, zeros.data(), zeros.size()), "zero an input");
      }
    launch_all(stream);
    cuda::check(d.cuStreamSynchronize(stream), "the call before capturing a CUDA graph");
    cuda::check(d.cuStreamBeginCapture(stream, cuda::kStreamCaptureModeThreadLocal),
                "cuStreamBeginCapture");
    try {
      launch_all(stream);
    } catch (const Error& e) {
      cuda::CUgraph broken = nullptr;
      d.cuStreamEndCapture(stream, &broken);
      if (broken) d.cuGraphDestroy(broken);
      user_error("capturing the call as a CUDA graph: {}", e.what());
    }
    cuda::check(d.cuStreamEndCapture(stream, &graph), "cuStreamEndCapture");
    cuda::check(d.cuGraphInstantiateWithFlags(&graph_exec, graph, 0),
                "cuGraphInstantiateWithFlags");
  }

  int64_t value_bytes(const ValueSpec& s) const {
    return shape_numel(s.shape) * dtype_size(s.dtype);
  }
  CUdeviceptr input_at(size_t i) const {
    return buffers.at(static_cast<size_t>(input_buffer.at(i))).owned;
  }
  CUdeviceptr output_at(size_t i) const {
    return buffers.at(static_cast<size_t>(output_buffer.at(i))).owned;
  }
};

GpuExportedModel::GpuExportedModel() = default;
GpuExportedModel::~GpuExportedModel() = default;
GpuExportedModel::GpuExportedModel(GpuExportedModel&&) noexcept = default;
GpuExportedModel& GpuExportedModel::operator=(GpuExportedModel&&) noexcept = default;

namespace {

// A kernel of the manifest before its cubin is loaded.
struct KernelEntry {
  std::string name, cubin, function;
  unsigned num_warps = 0, shared = 0;
};

}  // namespace

GpuExportedModel GpuExportedModel::load(const fs::path& dir, int device) {
  GpuLoadOptions o;
  o.device = device;
  return load(dir, o);
}

GpuExportedModel GpuExportedModel::load(const fs::path& dir, const GpuLoadOptions& options) {
  const int device = options.device;
  fs::path path = dir / "gpu_manifest.json";
  std::error_code ec;
  COIL_USER_CHECK(fs::exists(path, ec),
                  "{}: no gpu_manifest.json: not a GPU model `coil export --device cuda` wrote",
                  dir.string());
  auto impl = std::make_unique<Impl>();
  // The whole manifest is read and checked before the GPU is touched, so that a wrong file
  // gives its error on any machine.
  json j;
  std::vector<int> cap;
  std::vector<KernelEntry> kernel_entries;
  std::vector<gpu::ConvSpec> conv_specs;
  int64_t weights_bytes = 0;
  try {
    j = json::parse(read_file(path));
    COIL_USER_CHECK(j.at("format") == kGpuFormat, "{}: format {}, this runtime reads {}",
                    path.string(), j.at("format").dump(), kGpuFormat);
    for (const json& s : j.at("inputs")) impl->inputs.push_back(value_spec_from_json(s));
    for (const json& s : j.at("outputs")) impl->outputs.push_back(value_spec_from_json(s));
    impl->device = j.value("device", "");
    cap = j.at("capability").get<std::vector<int>>();
    COIL_USER_CHECK(cap.size() == 2, "{}: capability {}: expected [major, minor]", path.string(),
                    j.at("capability").dump());
    weights_bytes = j.at("weights_bytes").get<int64_t>();
    for (const json& k : j.at("kernels")) {
      KernelEntry e;
      e.name = k.at("name").get<std::string>();
      e.cubin = k.at("cubin").get<std::string>();
      e.function = k.at("function").get<std::string>();
      e.num_warps = k.at("num_warps").get<unsigned>();
      e.shared = k.at("shared").get<unsigned>();
      kernel_entries.push_back(std::move(e));
    }
    impl->input_buffer.assign(impl->inputs.size(), -1);
    impl->output_buffer.assign(impl->outputs.size(), -1);
    for (const json& b : j.at("buffers")) {
      Buffer buf;
      std::string kind = b.at("kind").get<std::string>();
      buf.kind = kind == "input"      ? Buffer::Kind::input
                 : kind == "output"   ? Buffer::Kind::output
                 : kind == "constant" ? Buffer::Kind::constant
                                      : Buffer::Kind::temp;
      buf.index = b.value("index", -1);
      buf.bytes = b.at("bytes").get<int64_t>();
      buf.offset = b.value("offset", int64_t{0});
      COIL_USER_CHECK(buf.bytes >= 0, "{}: a buffer of {} bytes", path.string(), buf.bytes);
      if (buf.kind == Buffer::Kind::constant)
        COIL_USER_CHECK(buf.offset >= 0 && buf.offset + buf.bytes <= weights_bytes,
                        "{}: a constant lies outside weights.bin", path.string());
      int at = static_cast<int>(impl->buffers.size());
      auto place = [&](std::vector<int>& where, const char* what) {
        COIL_USER_CHECK(buf.index >= 0 && buf.index < static_cast<int>(where.size()),
                        "{}: {} buffer of index {} ({} {}s)", path.string(), what, buf.index,
                        where.size(), what);
        where[static_cast<size_t>(buf.index)] = at;
      };
      if (buf.kind == Buffer::Kind::input) place(impl->input_buffer, "input");
      if (buf.kind == Buffer::Kind::output) place(impl->output_buffer, "output");
      impl->buffers.push_back(buf);
    }
    std::vector<int64_t> buffer_bytes;
    for (const Buffer& b : impl->buffers) buffer_bytes.push_back(b.bytes);
    auto gemm_operand = [&](const json& o) {
      GemmOperand g;
      g.buffer = o.at("buffer").get<int>();
      COIL_USER_CHECK(g.buffer >= 0 && g.buffer < static_cast<int>(impl->buffers.size()),
                      "{}: a matmul operand in buffer {}", path.string(), g.buffer);
      g.offset = o.at("offset").get<int64_t>();
      g.rows = o.at("rows").get<int64_t>();
      g.cols = o.at("cols").get<int64_t>();
      g.row_stride = o.at("row_stride").get<int64_t>();
      g.col_stride = o.at("col_stride").get<int64_t>();
      g.batch = o.at("batch").get<int64_t>();
      g.batch_stride = o.at("batch_stride").get<int64_t>();
      COIL_USER_CHECK(g.col_stride == 1 || g.cols == 1 || g.row_stride == 1 || g.rows == 1,
                      "{}: a matmul operand with strides ({}, {}): neither its rows nor its "
                      "columns are contiguous",
                      path.string(), g.row_stride, g.col_stride);
      return g;
    };
    for (const json& l : j.at("launches")) {
      Launch launch;
      if (l.contains("gemm")) {
        const json& g = l.at("gemm");
        launch.gemm = {gemm_operand(g.at("a")), gemm_operand(g.at("b")), gemm_operand(g.at("out"))};
        const GemmOperand& o = launch.gemm.out;
        COIL_USER_CHECK(o.col_stride == 1 || o.cols == 1,
                        "{}: a matmul output whose rows are not contiguous", path.string());
        launch.step = Step::gemm;
        std::string dt = g.value("dtype", std::string("f32"));
        launch.gemm.dtype = dt == "f32"    ? cuda::kCudaR32F
                            : dt == "bf16" ? cuda::kCudaR16BF
                            : dt == "f16"  ? cuda::kCudaR16F
                                           : -1;
        COIL_USER_CHECK(launch.gemm.dtype >= 0,
                        "{}: a matmul of dtype {}: cuBLAS products are f32, bf16 or f16",
                        path.string(), dt);
        launch.gemm.math = g.value("math", cuda::kCublasDefaultMath);
        const Gemm& gm = launch.gemm;
        COIL_USER_CHECK(
            gm.a.rows == gm.out.rows && gm.b.cols == gm.out.cols && gm.a.cols == gm.b.rows &&
                gm.out.batch >= 1 && (gm.a.batch == 1 || gm.a.batch == gm.out.batch) &&
                (gm.b.batch == 1 || gm.b.batch == gm.out.batch),
            "{}: a matmul of [{}x{}] (batch {}) and [{}x{}] (batch {}) into [{}x{}] (batch {})",
            path.string(), gm.a.rows, gm.a.cols, gm.a.batch, gm.b.rows, gm.b.cols, gm.b.batch,
            gm.out.rows, gm.out.cols, gm.out.batch);
        int64_t esize = dt == "f32" ? 4 : 2;
        for (const GemmOperand* op : {&gm.a, &gm.b, &gm.out}) {
          COIL_USER_CHECK(op->rows >= 1 && op->cols >= 1 && op->batch >= 1 && op->row_stride >= 0 &&
                              op->col_stride >= 0 && op->batch_stride >= 0,
                          "{}: a matmul operand of {}x{} (batch {}) with strides ({}, {}, {})",
                          path.string(), op->rows, op->cols, op->batch, op->batch_stride,
                          op->row_stride, op->col_stride);
          int64_t last = (op->batch - 1) * op->batch_stride + (op->rows - 1) * op->row_stride +
                         (op->cols - 1) * op->col_stride;
          gpu::check_extent(path, "a matmul operand", buffer_bytes, op->buffer, op->offset,
                            last + 1, esize);
        }
        impl->launches.push_back(std::move(launch));
        continue;
      }
      if (l.contains("conv")) {
        launch.step = Step::conv;
        launch.conv = static_cast<int>(conv_specs.size());
        conv_specs.push_back(gpu::parse_conv(l.at("conv"), buffer_bytes, path));
        impl->launches.push_back(std::move(launch));
        continue;
      }
      launch.kernel = l.at("kernel").get<int>();
      COIL_USER_CHECK(launch.kernel >= 0 && launch.kernel < static_cast<int>(kernel_entries.size()),
                      "{}: a launch of kernel {}", path.string(), launch.kernel);
      auto grid = l.at("grid").get<std::vector<unsigned>>();
      for (size_t i = 0; i < 3 && i < grid.size(); ++i) launch.grid[i] = grid[i];
      for (const json& a : l.at("args")) {
        Slot s;
        if (a.contains("buffer")) {
          s.buffer = a.at("buffer").get<int>();
          s.offset = a.at("offset").get<int64_t>();
          COIL_USER_CHECK(s.buffer >= 0 && s.buffer < static_cast<int>(impl->buffers.size()),
                          "{}: an argument in buffer {}", path.string(), s.buffer);
        } else {
          std::string ty = a.at("type").get<std::string>();
          if (ty == "i32" || ty == "i1" || ty == "i8" || ty == "i16") {
            int32_t v = a.at("value").get<int32_t>();
            std::memcpy(&s.bits, &v, sizeof v);
          } else if (ty == "u32") {
            uint32_t v = a.at("value").get<uint32_t>();
            std::memcpy(&s.bits, &v, sizeof v);
          } else if (ty == "i64" || ty == "u64") {
            int64_t v = a.at("value").get<int64_t>();
            std::memcpy(&s.bits, &v, sizeof v);
          } else if (ty == "fp32") {
            float v = a.at("value").get<float>();
            std::memcpy(&s.bits, &v, sizeof v);
          } else if (ty == "fp64") {
            double v = a.at("value").get<double>();
            std::memcpy(&s.bits, &v, sizeof v);
          } else {
            unsupported_error("{}: a kernel argument of type {}", path.string(), ty);
          }
        }
        launch.slots.push_back(s);
      }
      launch.slots.emplace_back();  // global scratch: none (the export refuses kernels needing it)
      launch.slots.emplace_back();  // profile scratch: none
      impl->launches.push_back(std::move(launch));
    }
  } catch (const json::exception& e) {
    user_error("{}: not a valid manifest: {}", path.string(), e.what());
  }
  for (size_t i = 0; i < impl->inputs.size(); ++i)
    COIL_USER_CHECK(impl->input_buffer[i] >= 0, "{}: input {} has no buffer", path.string(), i);
  for (size_t i = 0; i < impl->outputs.size(); ++i)
    COIL_USER_CHECK(impl->output_buffer[i] >= 0, "{}: output {} has no buffer", path.string(), i);
  for (Launch& l : impl->launches)
    for (Slot& s : l.slots) l.params.push_back(&s.bits);

  const cuda::Driver& d = cuda::driver();
  impl->live = true;
  cuda::check(d.cuInit(0), "cuInit");
  int count = 0;
  cuda::check(d.cuDeviceGetCount(&count), "cuDeviceGetCount");
  COIL_USER_CHECK(device >= 0 && device < count, "GPU model: device {} does not exist ({} GPUs)",
                  device, count);
  cuda::CUdevice dev = 0;
  cuda::check(d.cuDeviceGet(&dev, device), "cuDeviceGet");
  int major = 0, minor = 0, optin = 0;
  d.cuDeviceGetAttribute(&major, cuda::kAttrComputeCapabilityMajor, dev);
  d.cuDeviceGetAttribute(&minor, cuda::kAttrComputeCapabilityMinor, dev);
  d.cuDeviceGetAttribute(&optin, cuda::kAttrMaxSharedPerBlockOptin, dev);
  COIL_USER_CHECK(cap[0] == major && cap[1] == minor,
                  "{}: its kernels were compiled for compute capability {}.{} ({}), this GPU is "
                  "{}.{}: export it on a GPU like this one",
                  path.string(), cap[0], cap[1], impl->device, major, minor);
  cuda::CUcontext ctx = nullptr;
  cuda::check(d.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  cuda::check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");

  for (const KernelEntry& e : kernel_entries) {
    Kernel kernel;
    kernel.name = e.name;
    std::string cubin = read_file(dir / e.cubin);
    cuda::check(d.cuModuleLoadData(&kernel.module, cubin.data()), "load " + kernel.name);
    impl->kernels.push_back(kernel);
    Kernel& kk = impl->kernels.back();
    cuda::check(d.cuModuleGetFunction(&kk.function, kk.module, e.function.c_str()),
                "find " + kk.name);
    kk.block = 32u * e.num_warps;
    kk.shared = e.shared;
    if (kk.shared > 49152) {  // as Triton's loader: opt in to the larger shared memory
      int static_shared = 0;
      d.cuFuncGetAttribute(&static_shared, cuda::kFuncAttrSharedSizeBytes, kk.function);
      d.cuFuncSetCacheConfig(kk.function, cuda::kFuncCachePreferShared);
      cuda::check(d.cuFuncSetAttribute(kk.function, cuda::kFuncAttrMaxDynamicSharedSizeBytes,
                                       optin - static_shared),
                  "shared memory of " + kk.name);
    }
  }

  std::string weights = read_file(dir / "weights.bin");
  COIL_USER_CHECK(static_cast<int64_t>(weights.size()) == weights_bytes,
                  "{}: {} bytes, the manifest says {}", (dir / "weights.bin").string(),
                  weights.size(), weights_bytes);
  for (Buffer& buf : impl->buffers) {
    cuda::check(d.cuMemAlloc(&buf.owned, static_cast<size_t>(std::max<int64_t>(buf.bytes, 256))),
                "allocate a buffer");
    if (buf.kind == Buffer::Kind::constant && buf.bytes > 0)
      cuda::check(
          d.cuMemcpyHtoD(buf.owned, weights.data() + buf.offset, static_cast<size_t>(buf.bytes)),
          "upload the weights");
  }
  for (const Launch& l : impl->launches)
    if (l.step == Step::gemm && impl->blas == nullptr) {
      const cuda::Blas& b = cuda::blas();
      COIL_USER_CHECK(b.cublasCreate(&impl->blas) == 0, "cublasCreate failed");
    }
  if (!conv_specs.empty()) {
    const cuda::Dnn& n = cuda::dnn();
    cuda::check_dnn(n.cudnnCreate(&impl->dnn), "cudnnCreate");
    for (const gpu::ConvSpec& c : conv_specs) {
      impl->convs.push_back(gpu::make_conv(impl->dnn, c));
      impl->workspace_bytes = std::max(impl->workspace_bytes, impl->convs.back().workspace);
    }
    if (impl->workspace_bytes > 0)
      cuda::check(d.cuMemAlloc(&impl->workspace, impl->workspace_bytes),
                  fmt::format("allocate cuDNN's workspace ({} bytes)", impl->workspace_bytes));
  }
  impl->bind({}, {});
  if (options.cuda_graph) impl->capture();
  GpuExportedModel m;
  m.impl_ = std::move(impl);
  return m;
}

const std::vector<ValueSpec>& GpuExportedModel::inputs() const {
  return impl_->inputs;
}
const std::vector<ValueSpec>& GpuExportedModel::outputs() const {
  return impl_->outputs;
}

void GpuExportedModel::run_device(const std::vector<void*>& inputs,
                                  const std::vector<void*>& outputs, void* stream) const {
  COIL_USER_CHECK(impl_ != nullptr, "run: the model is empty");
  COIL_USER_CHECK(inputs.size() == impl_->inputs.size() && outputs.size() == impl_->outputs.size(),
                  "run_device: the model takes {} inputs and {} outputs, got {} and {}",
                  impl_->inputs.size(), impl_->outputs.size(), inputs.size(), outputs.size());
  std::vector<CUdeviceptr> in, out;
  for (void* p : inputs) in.push_back(reinterpret_cast<CUdeviceptr>(p));
  for (void* p : outputs) out.push_back(reinterpret_cast<CUdeviceptr>(p));
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (impl_->graph_exec) {
    // The graph reads and writes the model's buffers: copies in, the graph, copies out, all on
    // one stream (the caller's, else the model's).
    const cuda::Driver& d = cuda::driver();
    cuda::CUstream s = stream ? stream : impl_->stream;
    for (size_t i = 0; i < in.size(); ++i)
      if (int64_t n = impl_->value_bytes(impl_->inputs[i]); n > 0)
        cuda::check(d.cuMemcpyDtoDAsync(impl_->input_at(i), in[i], static_cast<size_t>(n), s),
                    "copy input " + impl_->inputs[i].name);
    cuda::check(d.cuGraphLaunch(impl_->graph_exec, s), "cuGraphLaunch");
    for (size_t i = 0; i < out.size(); ++i)
      if (int64_t n = impl_->value_bytes(impl_->outputs[i]); n > 0)
        cuda::check(d.cuMemcpyDtoDAsync(out[i], impl_->output_at(i), static_cast<size_t>(n), s),
                    "copy output " + impl_->outputs[i].name);
    return;
  }
  impl_->bind(in, out);
  impl_->launch_all(stream, in, out);
  impl_->bind({}, {});
}

bool GpuExportedModel::uses_cuda_graph() const {
  return impl_ != nullptr && impl_->graph_exec != nullptr;
}

void GpuExportedModel::set_inputs(const std::vector<TensorRef>& inputs) const {
  COIL_USER_CHECK(impl_ != nullptr, "set_inputs: the model is empty");
  std::vector<const void*> ptrs;
  std::vector<Tensor> keep = contiguous_inputs(impl_->inputs, inputs, ptrs);
  const cuda::Driver& d = cuda::driver();
  for (size_t i = 0; i < ptrs.size(); ++i) {
    int64_t bytes = impl_->value_bytes(impl_->inputs[i]);
    if (bytes <= 0) continue;
    if (impl_->stream)  // graphs: on the model's stream, behind its calls
      cuda::check(d.cuMemcpyHtoDAsync(impl_->input_at(i), ptrs[i], static_cast<size_t>(bytes),
                                      impl_->stream),
                  "copy input " + impl_->inputs[i].name);
    else
      cuda::check(d.cuMemcpyHtoD(impl_->input_at(i), ptrs[i], static_cast<size_t>(bytes)),
                  "copy input " + impl_->inputs[i].name);
  }
  // The host memory may go when this returns; a later launch may be on another stream.
  if (impl_->stream) cuda::check(d.cuStreamSynchronize(impl_->stream), "copy the inputs");
}

void GpuExportedModel::launch(void* stream) const {
  COIL_USER_CHECK(impl_ != nullptr, "launch: the model is empty");
  if (impl_->graph_exec) {
    cuda::check(cuda::driver().cuGraphLaunch(impl_->graph_exec, stream ? stream : impl_->stream),
                "cuGraphLaunch");
    return;
  }
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->launch_all(stream);
}

void GpuExportedModel::synchronize() const {
  cuda::check(cuda::driver().cuCtxSynchronize(), "synchronize");
}

std::vector<Tensor> GpuExportedModel::get_outputs() const {
  COIL_USER_CHECK(impl_ != nullptr, "get_outputs: the model is empty");
  synchronize();
  std::vector<Tensor> outs;
  const cuda::Driver& d = cuda::driver();
  for (size_t i = 0; i < impl_->outputs.size(); ++i) {
    const ValueSpec& s = impl_->outputs[i];
    outs.push_back(Tensor::empty(s.dtype, s.shape));
    int64_t bytes = impl_->value_bytes(s);
    if (bytes > 0)
      cuda::check(
          d.cuMemcpyDtoH(outs.back().data(), impl_->output_at(i), static_cast<size_t>(bytes)),
          "copy output " + s.name);
  }
  return outs;
}

std::vector<Tensor> GpuExportedModel::run(const std::vector<TensorRef>& inputs) const {
  COIL_USER_CHECK(impl_ != nullptr, "run: the model is empty");
  if (!impl_->graph_exec) {
    set_inputs(inputs);
    launch();
    return get_outputs();
  }
  // A graph: copies in, the graph and copies out queued on the model's stream, one wait.
  std::vector<const void*> ptrs;
  std::vector<Tensor> keep = contiguous_inputs(impl_->inputs, inputs, ptrs);
  const cuda::Driver& d = cuda::driver();
  cuda::CUstream s = impl_->stream;
  std::lock_guard<std::mutex> lock(impl_->mutex);
  for (size_t i = 0; i < ptrs.size(); ++i)
    if (int64_t n = impl_->value_bytes(impl_->inputs[i]); n > 0)
      cuda::check(d.cuMemcpyHtoDAsync(impl_->input_at(i), ptrs[i], static_cast<size_t>(n), s),
                  "copy input " + impl_->inputs[i].name);
  cuda::check(d.cuGraphLaunch(impl_->graph_exec, s), "cuGraphLaunch");
  std::vector<Tensor> outs;
  for (size_t i = 0; i < impl_->outputs.size(); ++i) {
    const ValueSpec& spec = impl_->outputs[i];
    outs.push_back(Tensor::empty(spec.dtype, spec.shape));
    if (int64_t n = impl_->value_bytes(spec); n > 0)
      cuda::check(
          d.cuMemcpyDtoHAsync(outs.back().data(), impl_->output_at(i), static_cast<size_t>(n), s),
          "copy output " + spec.name);
  }
  cuda::check(d.cuStreamSynchronize(s), "run");
  return outs;
}

std::vector<Tensor> GpuExportedModel::run(const std::vector<Tensor>& inputs) const {
  std::vector<TensorRef> refs;
  for (const Tensor& t : inputs) refs.push_back(t.ref());
  return run(refs);
}

const std::string& GpuExportedModel::device_name() const {
  return impl_->device;
}

}  // namespace coil
