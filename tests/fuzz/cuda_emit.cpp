#include "fuzz/cuda_emit.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "coil/error.h"
#include "fuzz/batch.h"
#include "fuzz/cuda_case.h"
#include "fuzz/failure_store.h"
#include "fuzz/forked_runner.h"
#include "fuzz/graph_generator.h"

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace coil::fuzz {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// What reproduces an emit-stage failure: the item's command, emitting that graph alone.
std::string emit_command(const EmitItem& it) {
  return it.command + " --emit-cuda /tmp/coil-emit-one";
}

FuzzCase build_case(const EmitItem& it) {
  return it.file.empty() ? generate_case(it.graph_seed) : load_case_file(it.file);
}

fs::path status_path(const CudaEmitOptions& o, const EmitItem& first) {
  return o.dir / ".status" / (cuda_case_name(first.key) + ".json");
}

// The child's work for one group of items: every member prepared alone (its reference and its
// own modules), the good ones merged and generated as one, the case directories written. The
// members' outcomes go to a status file the parent reads (a message may be long, and there is
// one per member); failing cases are saved here, where they were built.
void emit_group(const std::vector<EmitItem>& items, const std::vector<size_t>& group,
                const CudaEmitOptions& o) {
  std::vector<CudaMember> members(group.size());
  std::vector<Outcome> outcomes(group.size());
  std::vector<std::string> case_of(group.size());
  std::vector<bool> built(group.size(), false);
  std::vector<size_t> good;
  for (size_t j = 0; j < group.size(); ++j) {
    const EmitItem& it = items[group[j]];
    members[j].key = it.key;
    members[j].origin = it.command;
    try {
      members[j].c = build_case(it);
      built[j] = true;
    } catch (const Error& e) {
      outcomes[j] = {"interp-error", std::string("cannot build the case: ") + e.what()};
      continue;
    } catch (const std::exception& e) {
      outcomes[j] = {"internal", std::string("graph builder: ") + e.what()};
      continue;
    }
    outcomes[j] = prepare_member(members[j]);
    if (outcomes[j].cls.empty()) good.push_back(j);
  }
  auto write_alone = [&](size_t j) {
    case_of[j] = cuda_case_name(members[j].key);
    write_cuda_case(o.dir, case_of[j], {&members[j]}, nullptr, "", "");
  };
  std::optional<FuzzCase> batch_failure;  // the merged case of a failure only the batch shows
  if (good.size() == 1) write_alone(good[0]);
  if (good.size() > 1) {
    std::vector<const FuzzCase*> cases;
    std::vector<const CudaMember*> ms;
    for (size_t j : good) cases.push_back(&members[j].c), ms.push_back(&members[j]);
    std::optional<FuzzCase> merged;
    try {
      merged = merge_cases(cases);
    } catch (const Error&) {
      // emitted one by one below, as the CPU mode runs an unmergeable batch
    }
    std::string on, off;
    Outcome r;
    if (merged) {
      r = generate_cuda(*merged, true, on);
      if (r.cls.empty()) r = generate_cuda(*merged, false, off);
    }
    if (merged && r.cls.empty()) {
      std::string name = cuda_case_name(members[good[0]].key);
      write_cuda_case(o.dir, name, ms, &*merged, on, off);
      for (size_t j : good) case_of[j] = name;
    } else {
      // Every member generates alone: a failure of the merged graph (members interacting) goes
      // to the first member with the merged case, and each member gets a case of its own.
      if (merged) {
        Outcome& first = outcomes[good[0]];
        first = r;
        first.message = "only in its batch: " + r.message;
        if (!first.failed()) first.cls = "internal";  // alone they all were supported
        batch_failure = std::move(merged);
      }
      for (size_t j : good) write_alone(j);
    }
  }
  json status = json::array();
  for (size_t j = 0; j < group.size(); ++j) {
    const EmitItem& it = items[group[j]];
    std::string saved = "-";
    if (outcomes[j].failed() && built[j]) {
      bool merged_case = batch_failure && !good.empty() && j == good.front();
      const FuzzCase& c = merged_case ? *batch_failure : members[j].c;
      saved = save_failure(o.out, c, outcomes[j], emit_command(it)).first.string();
    }
    status.push_back({{"key", it.key},
                      {"class", outcomes[j].cls},
                      {"message", outcomes[j].message},
                      {"config", outcomes[j].config},
                      {"case", case_of[j]},
                      {"saved", saved}});
  }
  // (replace: a compiler message is not promised to be UTF-8)
  std::ofstream(status_path(o, items[group[0]]))
      << status.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
}

// The parent's view of the results: counts, the failures it logs, the case directories.
struct Tally {
  std::map<std::string, int> counts;   // class ("emitted" for a graph in a case) -> graphs
  std::map<std::string, int> skipped;  // failure_key of unsupported and rejected graphs -> graphs
  std::vector<json> failures;
  std::set<std::string> cases;
  size_t graphs = 0;
};

void record(Tally& t, const CudaEmitOptions& o, const EmitItem& it, const Outcome& out,
            const std::string& case_name, const std::string& saved) {
  ++t.graphs;
  if (!case_name.empty()) t.cases.insert(case_name);
  ++t.counts[out.cls.empty() ? "emitted" : out.cls];
  if (!out.cls.empty() && !out.failed()) ++t.skipped[failure_key(out)];
  if (!out.failed()) return;
  std::string key = failure_key(out);
  std::printf("[%s] %s\n    %s\n", emit_command(it).c_str(), key.c_str(), saved.c_str());
  std::fflush(stdout);
  log_failure(o.out, emit_command(it), out, saved);
  t.failures.push_back({{"key", it.key},
                        {"command", emit_command(it)},
                        {"class", out.cls},
                        {"failure_key", key},
                        {"message", out.message.substr(0, out.message.find('\n'))},
                        {"file", saved}});
}

// Reads a group's status file; false when there is none (the child died before writing it).
bool read_status(Tally& t, const CudaEmitOptions& o, const std::vector<EmitItem>& items,
                 const std::vector<size_t>& group) {
  std::ifstream in(status_path(o, items[group[0]]));
  if (!in.good()) return false;
  json status = json::parse(in, nullptr, false);
  if (status.is_discarded() || status.size() != group.size()) return false;
  for (size_t j = 0; j < group.size(); ++j) {
    const json& s = status[j];
    Outcome out{s["class"].get<std::string>(), s["message"].get<std::string>(),
                s["config"].get<int>()};
    record(t, o, items[group[j]], out, s["case"].get<std::string>(), s["saved"].get<std::string>());
  }
  return true;
}

// A child that crashed or timed out on a single item: that item's failure, saved here.
void record_crash(Tally& t, const CudaEmitOptions& o, const EmitItem& it, const Outcome& out) {
  std::string saved = "-";
  try {
    saved = save_failure(o.out, build_case(it), out, emit_command(it)).first.string();
  } catch (const std::exception&) {
    // the case cannot be built here either: listed without a file
  }
  record(t, o, it, out, "", saved);
}

std::vector<Outcome> run_groups(const std::vector<EmitItem>& items,
                                const std::vector<std::vector<size_t>>& groups,
                                const CudaEmitOptions& o) {
  for (const auto& g : groups) {
    std::error_code ec;
    fs::remove(status_path(o, items[g[0]]), ec);
  }
  return run_forked(groups.size(), o.jobs, o.timeout_s, [&](size_t g) {
    emit_group(items, groups[g], o);
    return Outcome{};
  });
}

}  // namespace

int run_cuda_emit(const std::vector<EmitItem>& items, const CudaEmitOptions& options) {
  CudaEmitOptions o = options;
  if (o.out.empty()) o.out = o.dir / "emit";
  fs::create_directories(o.dir / ".status");
  fs::create_directories(o.out);
  std::signal(SIGINT, [](int) { request_stop(); });
  std::signal(SIGTERM, [](int) { request_stop(); });
  std::vector<std::vector<size_t>> groups;
  for (size_t i = 0; i < items.size(); ++i) {
    if (groups.empty() || groups.back().size() >= static_cast<size_t>(std::max(o.batch, 1)))
      groups.emplace_back();
    groups.back().push_back(i);
  }

  const auto t0 = std::chrono::steady_clock::now();
  Tally t;
  const size_t chunk = static_cast<size_t>(std::max(4 * o.jobs, 8));
  for (size_t base = 0; base < groups.size() && !stop_requested() &&
                        (o.time_limit <= 0 || seconds_since(t0) < o.time_limit);
       base += chunk) {
    std::vector<std::vector<size_t>> part(
        groups.begin() + static_cast<std::ptrdiff_t>(base),
        groups.begin() + static_cast<std::ptrdiff_t>(std::min(base + chunk, groups.size())));
    std::vector<Outcome> run = run_groups(items, part, o);
    // A group whose child died is emitted again item by item, so that the crash (or timeout)
    // is the failure of the graph that causes it.
    std::vector<std::vector<size_t>> alone;
    std::vector<Outcome> alone_cause;
    for (size_t g = 0; g < part.size(); ++g) {
      if (run[g].cls == "stopped" || read_status(t, o, items, part[g])) continue;
      for (size_t i : part[g]) alone.push_back({i}), alone_cause.push_back(run[g]);
    }
    std::vector<Outcome> again = run_groups(items, alone, o);
    for (size_t k = 0; k < alone.size(); ++k) {
      const EmitItem& it = items[alone[k][0]];
      if (again[k].cls == "stopped" || read_status(t, o, items, alone[k])) continue;
      Outcome out = again[k].failed() ? again[k] : Outcome{"crash", "no status file", -1};
      record_crash(t, o, it, out);
    }
    if (!o.quiet) {
      double s = seconds_since(t0);
      std::fprintf(stderr,
                   "coil_fuzz: %zu/%zu graphs emitted into %zu cases, %zu failing, %.1f s\n",
                   t.graphs, items.size(), t.cases.size(), t.failures.size(), s);
    }
  }
  std::error_code ec;
  fs::remove_all(o.dir / ".status", ec);

  double total = seconds_since(t0);
  json summary{{"dir", fs::absolute(o.dir).string()},
               {"graphs", t.graphs},
               {"cases", t.cases.size()},
               {"batch", o.batch},
               {"seconds", total},
               {"counts", t.counts},
               {"not_failures", t.skipped},
               {"failures", t.failures}};
  std::ofstream(o.out / "summary.json")
      << summary.dump(1, ' ', false, json::error_handler_t::replace) << "\n";
  std::printf("\ncoil_fuzz --emit-cuda: %zu graphs in %zu cases in %.1f s (%.1f graphs/s) in %s\n",
              t.graphs, t.cases.size(), total, static_cast<double>(t.graphs) / total,
              o.dir.string().c_str());
  for (const auto& [cls, k] : t.counts) std::printf("  %-14s %d\n", cls.c_str(), k);
  std::printf("  failures: %zu (%s)\n", t.failures.size(), (o.out / "failures.tsv").c_str());
  return t.failures.empty() ? 0 : 1;
}

}  // namespace coil::fuzz
