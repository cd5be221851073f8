// ExportedModel (coil/runtime.h): an exported directory (runtime/artifact.h) loaded and run
// through the same ModelRunner as a compiled model, with the weights mapped from weights.bin
// rather than copied.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "coil/runtime.h"
#include "runtime/artifact.h"
#include "runtime/host_cpu.h"
#include "runtime/model_runner.h"
#include "runtime/runtime_libraries.h"
#include "support/check.h"
#include "support/hash.h"

namespace coil {
namespace {

namespace fs = std::filesystem;

/// A file mapped read only for the life of the model (the weights: kernels read them in place;
/// a kernel that wrote into one would fault rather than corrupt the file's other users).
class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const fs::path& path, int64_t expected_bytes) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    COIL_USER_CHECK(fd >= 0, "cannot open {}: {}", path.string(), std::strerror(errno));
    struct stat st {};
    ::fstat(fd, &st);
    if (st.st_size != expected_bytes) {
      ::close(fd);
      user_error("{}: {} bytes, the manifest says {}: the export is damaged or incomplete",
                 path.string(), static_cast<int64_t>(st.st_size), expected_bytes);
    }
    bytes_ = expected_bytes;
    if (bytes_ > 0) {
      void* p = ::mmap(nullptr, static_cast<size_t>(bytes_), PROT_READ, MAP_PRIVATE, fd, 0);
      int err = errno;
      ::close(fd);
      COIL_USER_CHECK(p != MAP_FAILED, "cannot map {}: {}", path.string(), std::strerror(err));
      data_ = static_cast<char*>(p);
    } else {
      ::close(fd);
    }
  }
  ~MappedFile() {
    if (data_ != nullptr) ::munmap(data_, static_cast<size_t>(bytes_));
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  char* data() const { return data_; }
  std::string_view view() const { return {data_, static_cast<size_t>(bytes_)}; }

 private:
  char* data_ = nullptr;
  int64_t bytes_ = 0;
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  COIL_USER_CHECK(in.good(), "cannot read {}", path.string());
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// dlopen returns the object already loaded under the same path, so a directory exported again
// while this process holds its old module would run the old code with the new weights. Each
// loaded module's checksum by path catches that.
std::mutex loaded_mutex;
std::map<std::string, std::string> loaded_modules;  // absolute path -> XXH3 of module.so

}  // namespace

struct ExportedModel::Impl {
  ExportInfo info;
  std::unique_ptr<MappedFile> weights;
  std::unique_ptr<ModelRunner> runner;
};

ExportedModel::ExportedModel() = default;
ExportedModel::~ExportedModel() = default;
ExportedModel::ExportedModel(ExportedModel&&) noexcept = default;
ExportedModel& ExportedModel::operator=(ExportedModel&&) noexcept = default;

ExportedModel ExportedModel::load(const fs::path& dir_given) {
  auto start = std::chrono::steady_clock::now();
  std::error_code ec;
  fs::path dir = fs::absolute(dir_given, ec);
  ExportManifest m = read_export_manifest(dir);
  for (const std::string& f : m.info.cpu_features)
    COIL_USER_CHECK(cpu_has_feature(f),
                    "{}: its code is for the {} ISA and needs the CPU feature '{}', which this "
                    "CPU lacks (it needs {}): export the model for this CPU (COIL_CPU_ISA=avx2, "
                    "or scalar, when running `coil export`)",
                    dir.string(), m.info.isa, f, fmt::join(m.info.cpu_features, ", "));

  fs::path so = dir / "module.so";
  std::string module = read_file(so);
  COIL_USER_CHECK(static_cast<int64_t>(module.size()) == m.info.module_bytes &&
                      checksum(module) == m.module_xxh3,
                  "{}: its checksum differs from the manifest's: the export is damaged or was "
                  "changed (export it again)",
                  so.string());
  auto impl = std::make_unique<Impl>();
  impl->weights = std::make_unique<MappedFile>(dir / "weights.bin", m.info.weights_bytes);
  COIL_USER_CHECK(checksum(impl->weights->view()) == m.weights_xxh3,
                  "{}: its checksum differs from the manifest's: the export is damaged or was "
                  "changed (export it again)",
                  (dir / "weights.bin").string());
  {
    std::lock_guard<std::mutex> lock(loaded_mutex);
    auto [at, added] = loaded_modules.emplace(so.string(), m.module_xxh3);
    COIL_USER_CHECK(added || at->second == m.module_xxh3,
                    "{}: this process loaded another module from this path before, and a loaded "
                    "module cannot be replaced: load the new export in a new process, or export "
                    "it to another directory",
                    so.string());
  }

  load_runtime_libraries();
  ModelRunner::Parts parts;
  parts.library = SharedLibrary::open(so);
  parts.inputs = std::move(m.inputs);
  parts.outputs = std::move(m.outputs);
  parts.run_checks = std::move(m.run_checks);
  for (const WeightsBlob& b : m.constants)
    parts.constants.push_back(impl->weights->data() + b.offset);
  parts.arena_bytes = m.info.arena_bytes;
  if (m.packed.bytes > 0) parts.packed = impl->weights->data() + m.packed.offset;
  impl->runner = std::make_unique<ModelRunner>(std::move(parts));
  COIL_USER_CHECK(impl->runner->packed_bytes() == m.packed.bytes,
                  "{}: the module packs {} bytes of weights, the manifest holds {}: the export is "
                  "inconsistent (export it again)",
                  dir.string(), impl->runner->packed_bytes(), m.packed.bytes);
  impl->info = std::move(m.info);
  impl->info.load_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ExportedModel model;
  model.impl_ = std::move(impl);
  return model;
}

std::vector<Tensor> ExportedModel::run(const std::vector<TensorRef>& inputs) const {
  COIL_USER_CHECK(impl_ != nullptr, "run: the model is empty (moved from or default-constructed)");
  std::vector<Tensor> outs;
  std::vector<void*> ptrs;
  for (const ValueSpec& s : impl_->runner->outputs()) {
    outs.push_back(Tensor::empty(s.dtype, s.shape));
    ptrs.push_back(outs.back().data());
  }
  impl_->runner->run(inputs, ptrs);
  return outs;
}

std::vector<Tensor> ExportedModel::run(const std::vector<Tensor>& inputs) const {
  std::vector<TensorRef> refs;
  for (const Tensor& t : inputs) refs.push_back(t.ref());
  return run(refs);
}

void ExportedModel::run_into(const std::vector<TensorRef>& inputs,
                             const std::vector<void*>& outputs) const {
  COIL_USER_CHECK(impl_ != nullptr, "run: the model is empty (moved from or default-constructed)");
  impl_->runner->run(inputs, outputs);
}

const std::vector<ValueSpec>& ExportedModel::inputs() const {
  COIL_USER_CHECK(impl_ != nullptr, "inputs: the model is empty");
  return impl_->runner->inputs();
}

const std::vector<ValueSpec>& ExportedModel::outputs() const {
  COIL_USER_CHECK(impl_ != nullptr, "outputs: the model is empty");
  return impl_->runner->outputs();
}

const ExportInfo& ExportedModel::info() const {
  COIL_USER_CHECK(impl_ != nullptr, "info: the model is empty");
  return impl_->info;
}

}  // namespace coil
