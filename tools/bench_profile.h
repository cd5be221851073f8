// `coil bench --profile`: the per-kernel table, the machine's measured memory ceiling, and the
// Chrome trace (tools/bench_profile.cpp).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "coil/coil.h"

namespace coil::cli {

/// The run-time percentile `q` (0..1) of `v` (nearest rank).
double percentile(std::vector<double> v, double q);

/// The 1-minute load average (/proc/loadavg), or -1 where unreadable.
double load_average();

/// The host's copy bandwidth in bytes/s at the current OpenMP thread count: the best of a few
/// passes copying 256 MiB, bytes read plus written (a STREAM-like ceiling for GB/s figures).
double measure_copy_bandwidth();

/// Per kernel: the median time, its share of the kernels' sum, bytes moved, GB/s and the
/// fraction of `ceiling_bytes_per_s`; as JSON objects in call order.
nlohmann::ordered_json profile_json(const KernelProfile& p, double ceiling_bytes_per_s);

/// Prints profile_json's rows as a table, then the sum of the kernels against `whole_ms`.
void print_profile(const nlohmann::ordered_json& kernels, double ceiling_bytes_per_s,
                   double whole_ms);

/// The GPU profile of run.py's report (`kernels`: name, median_us, share per Triton kernel, in
/// launch order) with each kernel's bytes and graph nodes from the module's report, and GB/s.
nlohmann::ordered_json gpu_profile_json(const nlohmann::json& run_report,
                                        const CompileReport& module_report);

/// Prints gpu_profile_json's rows, then the kernels' sum against the whole call's GPU time.
void print_gpu_profile(const nlohmann::ordered_json& kernels, double call_us);

/// Writes the profile as a Chrome trace (Perfetto, chrome://tracing): one complete event per
/// kernel call, the graph nodes in its args.
void write_chrome_trace(const KernelProfile& p, const std::string& path);

}  // namespace coil::cli
