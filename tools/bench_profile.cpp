#include "bench_profile.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "support/check.h"

namespace coil::cli {

double percentile(std::vector<double> v, double q) {
  COIL_ASSERT(!v.empty(), "percentile of no values");
  std::sort(v.begin(), v.end());
  auto rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

double load_average() {
  std::ifstream in("/proc/loadavg");
  double l = -1;
  if (!(in >> l)) return -1;
  return l;
}

double measure_copy_bandwidth() {
  constexpr int64_t kFloats = int64_t{64} << 20;  // 256 MiB per array: far beyond any cache
  Tensor src = Tensor::empty(DType::F32, {kFloats});
  Tensor dst = Tensor::empty(DType::F32, {kFloats});
  auto* s = static_cast<float*>(src.data());
  auto* d = static_cast<float*>(dst.data());
#pragma omp parallel for
  for (int64_t i = 0; i < kFloats; ++i) s[i] = static_cast<float>(i & 1023), d[i] = 0;
  double best = 1e30;
  for (int pass = 0; pass < 5; ++pass) {
    auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for
    for (int64_t i = 0; i < kFloats; ++i) d[i] = s[i];
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * static_cast<double>(kFloats) * sizeof(float) / best;
}

namespace {

/// The width of the table's kernel column.
size_t name_width(const nlohmann::ordered_json& kernels) {
  size_t width = 6;
  for (const auto& k : kernels) width = std::max(width, k["name"].get<std::string>().size());
  return width;
}

/// A row's graph nodes, cut to 60 characters.
std::string nodes_text(const nlohmann::ordered_json& row) {
  std::vector<std::string> origins = row["origins"];
  std::string nodes = fmt::format("{}", fmt::join(origins, ", "));
  if (nodes.size() > 60) nodes = nodes.substr(0, 57) + "...";
  return nodes;
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

nlohmann::ordered_json profile_json(const KernelProfile& p, double ceiling_bytes_per_s) {
  std::vector<double> medians;
  for (size_t k = 0; k < p.kernels.size(); ++k) {
    std::vector<double> t;
    for (const auto& run : p.runs) t.push_back(run[k].seconds);
    medians.push_back(median_of(t));
  }
  double sum = 0;
  for (double m : medians) sum += m;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (size_t k = 0; k < p.kernels.size(); ++k) {
    const KernelInfo& ki = p.kernels[k];
    double bytes = static_cast<double>(ki.bytes_read + ki.bytes_written);
    double gbps = medians[k] > 0 ? bytes / medians[k] / 1e9 : 0;
    rows.push_back(
        {{"name", ki.name},
         {"median_us", medians[k] * 1e6},
         {"share", sum > 0 ? medians[k] / sum : 0},
         {"bytes", ki.bytes_read + ki.bytes_written},
         {"ops", ki.ops},
         {"gb_per_s", gbps},
         {"gops_per_s", medians[k] > 0 ? static_cast<double>(ki.ops) / medians[k] / 1e9 : 0},
         {"fraction_of_ceiling", gbps * 1e9 / ceiling_bytes_per_s},
         {"origins", ki.origins}});
  }
  return rows;
}

void print_profile(const nlohmann::ordered_json& kernels, double ceiling_bytes_per_s,
                   double whole_ms) {
  const size_t width = name_width(kernels);
  fmt::print("{:<{}}  {:>10}  {:>6}  {:>10}  {:>7}  {:>8}  graph nodes\n", "kernel", width,
             "median us", "share", "bytes", "GB/s", "ceiling");
  double sum_us = 0;
  for (const auto& k : kernels) {
    sum_us += k["median_us"].get<double>();
    const std::string nodes = nodes_text(k);
    fmt::print("{:<{}}  {:>10.2f}  {:>5.1f}%  {:>10}  {:>7.1f}  {:>7.0f}%  {}\n",
               k["name"].get<std::string>(), width, k["median_us"].get<double>(),
               100 * k["share"].get<double>(), k["bytes"].get<int64_t>(),
               k["gb_per_s"].get<double>(), 100 * k["fraction_of_ceiling"].get<double>(), nodes);
  }
  fmt::print(
      "ceiling: {:.1f} GB/s (copy bandwidth measured now on {} threads; above 100%: the data "
      "was in cache)\n",
      ceiling_bytes_per_s / 1e9, omp_get_max_threads());
  fmt::print(
      "kernels one by one: {:.3f} ms in total; the whole model: median {:.3f} ms ({:.2f}x)\n",
      sum_us / 1e3, whole_ms, whole_ms > 0 ? sum_us / 1e3 / whole_ms : 0.0);
}

nlohmann::ordered_json gpu_profile_json(const nlohmann::json& run_report,
                                        const CompileReport& module_report) {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const auto& k : run_report.value("kernels", nlohmann::json::array())) {
    std::string name = k.value("name", "");
    double us = k.value("median_us", 0.0);
    int64_t bytes = 0;
    std::vector<std::string> origins;
    for (const KernelInfo& ki : module_report.kernels)
      if (ki.name == name) {
        bytes = ki.bytes_read + ki.bytes_written;
        origins = ki.origins;
      }
    rows.push_back({{"name", name},
                    {"median_us", us},
                    {"share", k.value("share", 0.0)},
                    {"launches_per_call", k.value("launches_per_call", 1.0)},
                    {"bytes", bytes},
                    {"gb_per_s", us > 0 ? static_cast<double>(bytes) / us / 1e3 : 0},
                    {"origins", origins}});
  }
  return rows;
}

void print_gpu_profile(const nlohmann::ordered_json& kernels, double call_us) {
  const size_t width = name_width(kernels);
  fmt::print("{:<{}}  {:>10}  {:>6}  {:>10}  {:>8}  graph nodes\n", "kernel", width, "median us",
             "share", "bytes", "GB/s");
  double sum_us = 0;
  for (const auto& k : kernels) {
    sum_us += k["median_us"].get<double>();
    const std::string nodes = nodes_text(k);
    fmt::print("{:<{}}  {:>10.2f}  {:>5.1f}%  {:>10}  {:>8.1f}  {}\n", k["name"].get<std::string>(),
               width, k["median_us"].get<double>(), 100 * k["share"].get<double>(),
               k["bytes"].get<int64_t>(), k["gb_per_s"].get<double>(), nodes);
  }
  fmt::print(
      "kernels: {:.2f} us in total; the whole call: {:.2f} us of GPU time between its events "
      "(library calls made by call() itself are in it and in no kernel)\n",
      sum_us, call_us);
}

void write_chrome_trace(const KernelProfile& p, const std::string& path) {
  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  for (size_t r = 0; r < p.runs.size(); ++r)
    for (size_t k = 0; k < p.kernels.size(); ++k)
      events.push_back({{"name", p.kernels[k].name},
                        {"cat", "kernel"},
                        {"ph", "X"},
                        {"ts", p.runs[r][k].start_s * 1e6},
                        {"dur", p.runs[r][k].seconds * 1e6},
                        {"pid", 1},
                        {"tid", 1},
                        {"args",
                         {{"run", r},
                          {"bytes", p.kernels[k].bytes_read + p.kernels[k].bytes_written},
                          {"graph nodes", p.kernels[k].origins}}}});
  nlohmann::ordered_json trace{{"traceEvents", events}, {"displayTimeUnit", "ns"}};
  std::ofstream out(path);
  out << trace.dump(1) << "\n";
  COIL_USER_CHECK(out.good(), "--trace {}: cannot write it", path);
}

}  // namespace coil::cli
