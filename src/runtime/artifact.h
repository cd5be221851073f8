// The exported model (`coil export MODEL -o DIR`, CompiledModel::export_to; loaded by
// ExportedModel::load in coil/runtime.h): a directory of three files,
//
//   manifest.json  what the runtime needs besides the code: format and coil version, the ISA
//                  and the CPU features the code needs, inputs and outputs (names, dtypes,
//                  shapes), the run-time checks (their messages), the arena size, where each
//                  constant and the packed weights lie in weights.bin, the kernels, and each
//                  file's size and XXH3-128 checksum.
//   module.so      the generated code (the code cache's shared object, copied), whose entry
//                  points are kernels/coil_module_abi.h's.
//   weights.bin    the module's constants, each at a 64-byte aligned offset, then the packed
//                  region that coil_graph_pack filled when the model was compiled (the matmul
//                  template's packed weights): the runtime maps the file and packs nothing.
//
// Loading checks everything a wrong file could break before any code runs: the format, the
// coil version (module.so calls libcoil_vmath and libcoil_extern, whose interface is coil's
// own), the CPU's features, the checksums. docs/deploy.md describes the format for users.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "coil/runtime.h"
#include "support/run_check.h"

namespace coil {

inline constexpr const char* kExportFormat = "coil-export-v1";
/// coil's version (CMake's PROJECT_VERSION), what a manifest records and the runtime demands.
const char* export_coil_version();

/// Where one blob lies in weights.bin.
struct WeightsBlob {
  int64_t offset = 0;
  int64_t bytes = 0;
};

struct ExportManifest {
  ExportInfo info;  // format, version, isa, cpu features, kernels, file sizes, arena
  std::vector<ValueSpec> inputs, outputs;
  std::vector<RunCheck> run_checks;
  std::vector<WeightsBlob> constants;  // one per constant of the module, in its order
  WeightsBlob packed;                  // the packed region (coil_graph_packed_bytes)
  std::string module_xxh3, weights_xxh3;
};

/// One piece of data for weights.bin.
struct WeightsSource {
  const void* data = nullptr;
  int64_t bytes = 0;
};

/// Writes `dir` (created if needed): module.so copied from `module_so`, weights.bin from
/// `constants` then `packed`, and manifest.json from `manifest` with the blobs' offsets, the
/// files' sizes and checksums filled in. Each file is written under a temporary name and
/// renamed, manifest.json last, so a reader never sees a half-written export.
void write_export(const std::filesystem::path& dir, ExportManifest manifest,
                  const std::filesystem::path& module_so,
                  const std::vector<WeightsSource>& constants, WeightsSource packed);

/// Reads and checks DIR/manifest.json (format, version; coil::Error naming the file).
ExportManifest read_export_manifest(const std::filesystem::path& dir);

// The JSON of the values and run-time checks, shared with the whole-graph cache's entries
// (driver/model_cache.h).
nlohmann::json value_spec_json(const ValueSpec& s);
ValueSpec value_spec_from_json(const nlohmann::json& j);
nlohmann::json run_check_json(const RunCheck& c);
RunCheck run_check_from_json(const nlohmann::json& j);

}  // namespace coil
