#include "bench_host.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include <fmt/format.h>

#include "runtime/toolchain.h"

namespace coil::bench {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

std::string read_first_line(const fs::path& p) {
  std::ifstream f(p);
  std::string line;
  std::getline(f, line);
  return line;
}

std::string load_average() {
  return read_first_line("/proc/loadavg");
}

json host_json() {
  json h;
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      h["cpu"] = line.substr(line.find(':') + 2);
      break;
    }
  }
  h["logical_cpus"] = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  json caches = json::object();
  for (int i = 0; i < 8; ++i) {
    fs::path dir = fmt::format("/sys/devices/system/cpu/cpu0/cache/index{}", i);
    if (!fs::exists(dir)) break;
    std::string type = read_first_line(dir / "type");
    if (type == "Instruction") continue;
    std::string key =
        fmt::format("L{}{}", read_first_line(dir / "level"), type == "Data" ? "d" : "");
    caches[key] = read_first_line(dir / "size");
  }
  h["caches_per_cpu0"] = caches;
  utsname u{};
  if (uname(&u) == 0) h["kernel"] = fmt::format("{} {} {}", u.sysname, u.release, u.machine);
  try {
    h["compiler"] = Toolchain::get().version;
  } catch (const std::exception& e) {
    h["compiler"] = std::string("unknown: ") + e.what();
  }
  return h;
}

void parse_or_exit(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    std::exit(rc == 0 ? 0 : 2);
  }
}

}  // namespace coil::bench
