// docs/errors.md, run: every row of its tables is a command, an exit code and a message. Each
// command runs through the shell in a directory of the files the page describes, with `coil` on
// PATH; the exit code must match and the message must appear (on stderr for "coil: ..." lines,
// else on stdout; "..." stands for any text). So the page cannot drift from what coil does.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "conformance/onnx_model_builder.h"
#include "support/npy.h"

namespace coil {
namespace {

namespace fs = std::filesystem;
using namespace onnx_test;

struct Row {
  std::string section, what, command, message;
  int exit = -1;
};

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string unquote(std::string s) {
  if (s.size() >= 2 && s.front() == '`' && s.back() == '`') s = s.substr(1, s.size() - 2);
  return s;
}

/// The rows of the tables headed "| case | command | exit | message |".
std::vector<Row> read_rows(const fs::path& page) {
  std::vector<Row> rows;
  std::stringstream in(read_file(page));
  std::string section;
  bool in_table = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("## ", 0) == 0) section = line.substr(3);
    if (line == "| case | command | exit | message |") {
      in_table = true;
      continue;
    }
    if (!in_table || line.rfind("|---", 0) == 0) continue;
    if (line.rfind("| ", 0) != 0) {
      in_table = false;
      continue;
    }
    std::vector<std::string> cells;
    std::string body = line.substr(2, line.size() - 4);  // between "| " and " |"
    for (size_t start = 0;;) {
      size_t bar = body.find(" | ", start);
      cells.push_back(body.substr(start, bar == std::string::npos ? bar : bar - start));
      if (bar == std::string::npos) break;
      start = bar + 3;
    }
    EXPECT_EQ(cells.size(), 4u) << line;
    if (cells.size() != 4) continue;
    rows.push_back({section, cells[0], unquote(cells[1]), unquote(cells[3]), std::stoi(cells[2])});
  }
  return rows;
}

/// Whether `text` holds the parts of `pattern` between its "..." in order.
bool matches(const std::string& text, const std::string& pattern) {
  size_t at = 0;
  for (size_t start = 0;;) {
    size_t dots = pattern.find("...", start);
    std::string part = pattern.substr(start, dots == std::string::npos ? dots : dots - start);
    size_t found = text.find(part, at);
    if (found == std::string::npos) return false;
    at = found + part.size();
    if (dots == std::string::npos) return true;
    start = dots + 3;
  }
}

Tensor filled(std::vector<int64_t> shape, double v) {
  Tensor t = Tensor::zeros(DType::F32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.set_from_double(i, v);
  return t;
}

/// The files docs/errors.md describes.
void write_fixtures(const fs::path& dir) {
  auto text = [&](const char* name, const char* body) { std::ofstream(dir / name) << body; };
  text("model.coil", "input x: f32[s0, 16]\ninput b: f32[16]\ny = add(x, b)\noutput y\n");
  text("syntax.coil", "input x: f32[4]\ny = relu(x\noutput y\n");
  text("badshape.coil", "input x: f32[4, 3]\ninput y: f32[5]\nz = add(x, y)\noutput z\n");
  text("unknown_op.coil", "input x: f32[4]\ny = frobnicate(x)\noutput y\n");
  text("gather.coil",
       "input d: f32[10, 4]\ninput i: i64[3]\ng = gather(d, i) {axis=0}\noutput g\n");
  text("pool.coil", "input x: f32[1, 1, 16, 16]\ny = max_pool2d(x) {kernel=[9, 9]}\noutput y\n");
  text("conv_dynamic.coil",
       "input x: f32[n, 2, 8, 8]\ninput w: f32[3, 2, 3, 3]\ny = conv2d(x, w)\noutput y\n");
  text("conv64.coil",
       "input x: f64[1, 2, 8, 8]\ninput w: f64[3, 2, 3, 3]\ny = conv2d(x, w)\noutput y\n");
  text("garbage.onnx", "not a model\n");
  text("notnpy.npy", "hello");
  write_npy(dir / "x.npy", filled({2, 16}, 1));
  write_npy(dir / "b.npy", filled({16}, 1));
  write_npy(dir / "wrong.npy", filled({2, 16}, 0));
  write_npy(dir / "x3d.npy", filled({2, 16, 1}, 1));
  onnx::ModelProto det = empty_model(13);
  set_type(det.mutable_graph()->add_input(), "x", TP::FLOAT, {4});
  set_type(det.mutable_graph()->add_output(), "y", TP::FLOAT, {4});
  add_node(det, "StringNormalizer", {"x"}, {"y"});
  std::ofstream(dir / "unsupported_op.onnx", std::ios::binary) << det.SerializeAsString();
  std::ofstream(dir / "opset99.onnx", std::ios::binary) << relu_model(99).SerializeAsString();
  onnx::ModelProto att = empty_model(23);  // Attention with a double softmax of f32 inputs
  for (const char* name : {"q", "k", "v"})
    set_type(att.mutable_graph()->add_input(), name, TP::FLOAT, {1, 2, 4, 8});
  set_type(att.mutable_graph()->add_output(), "y", TP::FLOAT, {1, 2, 4, 8});
  add_int_attr(add_node(att, "Attention", {"q", "k", "v"}, {"y"}, "att"), "softmax_precision", 11);
  std::ofstream(dir / "attention_f64_softmax.onnx", std::ios::binary) << att.SerializeAsString();
  // Names as torch.onnx writes them, which coil's identifiers differ from.
  onnx::ModelProto named = empty_model(13);
  set_type(named.mutable_graph()->add_input(), "onnx::Gemm_0", TP::FLOAT, {2, 16});
  set_type(named.mutable_graph()->add_output(), "4", TP::FLOAT, {2, 16});
  add_node(named, "Relu", {"onnx::Gemm_0"}, {"4"});
  std::ofstream(dir / "named.onnx", std::ios::binary) << named.SerializeAsString();
  fs::create_directories(dir / "bin");
  fs::create_symlink(COIL_CLI, dir / "bin" / "coil");
}

TEST(CliErrors, EveryRowOfDocsErrorsMd) {
  std::vector<Row> rows = read_rows(fs::path(COIL_SOURCE_DIR) / "docs" / "errors.md");
  // A parse that finds nothing would pass vacuously: every section must have its rows.
  std::map<std::string, int> per_section;
  for (const Row& r : rows) ++per_section[r.section];
  for (const char* s : {"Command line", "Files and models", "Sizes", "Environment variables",
                        "Unsupported ops and features", "Internal errors"})
    EXPECT_GE(per_section[s], 2) << s;
  std::map<int, int> per_exit;
  for (const Row& r : rows) ++per_exit[r.exit];
  for (int code = 0; code <= 4; ++code) EXPECT_GE(per_exit[code], 1) << "exit " << code;

  fs::path dir = fs::path(COIL_BINARY_DIR) / "test-cli" / fmt::format("errors-{}", getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  write_fixtures(dir);
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    SCOPED_TRACE(fmt::format("docs/errors.md, {}: {}: {}", r.section, r.what, r.command));
    std::ofstream(dir / "run.sh") << "PATH=\"$PWD/bin:$PATH\"\n" << r.command << "\n";
    int status = std::system(
        fmt::format("cd '{}' && timeout 120 sh run.sh > stdout.txt 2> stderr.txt", dir.string())
            .c_str());
    std::string out = read_file(dir / "stdout.txt"), err = read_file(dir / "stderr.txt");
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), r.exit) << "stdout:\n" << out << "stderr:\n" << err;
    bool on_stderr = r.message.rfind("coil: ", 0) == 0;
    EXPECT_TRUE(matches(on_stderr ? err : out, r.message))
        << "expected on " << (on_stderr ? "stderr" : "stdout") << ": " << r.message << "\nstdout:\n"
        << out << "stderr:\n"
        << err;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace coil
