// What the benchmarks record about the machine they ran on (shared by coil_cpu_bench and
// coil_gemm_bench): the CPU, its caches, the kernel and the compiler, and the load average,
// so that a result file says under which conditions it was measured. Also their shared
// command-line handling.
#pragma once

#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace coil::bench {

/// The first line of a text file ("" when it cannot be read).
std::string read_first_line(const std::filesystem::path& p);
/// /proc/loadavg's line: 1/5/15-minute load, running/total tasks, last pid.
std::string load_average();
/// {cpu, logical_cpus, caches_per_cpu0, kernel, compiler}, in that order.
nlohmann::ordered_json host_json();
/// Parses the command line; on --help prints it and exits 0, on a bad option prints why and
/// exits 2.
void parse_or_exit(CLI::App& app, int argc, char** argv);

}  // namespace coil::bench
