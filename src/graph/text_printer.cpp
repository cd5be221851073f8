// The printer of the graph text format (the grammar is in graph/text_format.cpp). Every node
// is written with its inferred type and every constant with its data, in text that reads back
// exactly: parsing the output gives a graph that prints identically.
#include <cmath>

#include "coil/graph.h"
#include "graph/text_format.h"
#include "graph/text_lexer.h"
#include "support/hash.h"

namespace coil {
namespace {

// Longest a line of constant data grows before it wraps.
constexpr size_t kDataLineWidth = 96;

// Shortest text that reads back (as a float) to `f`, with a '.' or an exponent.
std::string float_text(float f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", f);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string element_text(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::Bool:
      return t.data_as<bool>()[i] ? "true" : "false";
    case DType::U8:
      return std::to_string(t.data_as<uint8_t>()[i]);
    case DType::I8:
      return std::to_string(t.data_as<int8_t>()[i]);
    case DType::I32:
      return std::to_string(t.data_as<int32_t>()[i]);
    case DType::I64:
      return std::to_string(t.data_as<int64_t>()[i]);
    case DType::I16:
      return std::to_string(t.data_as<int16_t>()[i]);
    case DType::U16:
      return std::to_string(t.data_as<uint16_t>()[i]);
    case DType::U32:
      return std::to_string(t.data_as<uint32_t>()[i]);
    case DType::U64:
      return std::to_string(t.data_as<uint64_t>()[i]);
    case DType::F64:
      return attr_to_string(t.data_as<double>()[i]);
    case DType::F32:
      return float_text(t.data_as<float>()[i]);
    case DType::F16:
    case DType::BF16:
      return float_text(static_cast<float>(t.item_as_double(i)));
  }
  COIL_UNREACHABLE("bad dtype {}", static_cast<int>(t.dtype()));
}

void print_data(std::string& out, const Tensor& value) {
  Tensor t = value.is_contiguous() ? value : value.clone();
  out += '[';
  size_t line_start = out.rfind('\n') + 1;  // npos + 1 == 0
  for (int64_t i = 0; i < t.numel(); ++i) {
    std::string e = element_text(t, i);
    if (i > 0) {
      out += ',';
      if (out.size() - line_start + e.size() + 1 > kDataLineWidth) {
        out += "\n   ";
        line_start = out.size() - 3;
      }
      out += ' ';
    }
    out += e;
  }
  out += ']';
}

std::string attr_text(const AttrValue& v) {
  if (const auto* s = std::get_if<std::string>(&v)) return text::quote_string(*s);
  return attr_to_string(v);
}

enum class ConstantData { print, hash, as_input };

void print_node(std::string& out, const Graph& g, const Node& n, ConstantData data) {
  std::string_view op = n.op_name();
  if (op == "input") {
    out += fmt::format("input {}: {}\n", n.name, type_str(n.type));
    return;
  }
  if (op == "constant") {
    COIL_ASSERT(n.data, "constant {} has no data", n.name);
    if (data == ConstantData::as_input) {
      out += fmt::format("input {}: {}  # a constant of the model, its data left out\n", n.name,
                         type_str(n.type));
      return;
    }
    out += fmt::format("const {}: {} = ", n.name, type_str(n.type));
    if (data == ConstantData::hash) {
      Tensor t = n.data->is_contiguous() ? *n.data : n.data->clone();
      out += "xxh3:" +
             checksum(std::string_view(static_cast<const char*>(t.data()),
                                       static_cast<size_t>(t.numel()) * dtype_size(t.dtype())));
    } else {
      print_data(out, *n.data);
    }
    out += '\n';
    return;
  }
  std::vector<std::string_view> args;
  for (int in : n.inputs) args.push_back(g.node(in).name);
  out += fmt::format("{} = {}({})", n.name, op, fmt::join(args, ", "));
  if (!n.attrs.items().empty()) out += fmt::format(" {}", attrs_to_text(n.attrs));
  out += fmt::format(" : {}\n", type_str(n.type));
}

}  // namespace

std::string attrs_to_text(const Attrs& attrs) {
  std::vector<std::string> items;
  for (const auto& [key, value] : attrs.items())
    items.push_back(
        fmt::format("{}={}", is_identifier(key) ? key : text::quote_string(key), attr_text(value)));
  return fmt::format("{{{}}}", fmt::join(items, ", "));
}

namespace {

std::string print_graph(const Graph& g, ConstantData data) {
  std::string out;
  for (const auto& n : g.nodes()) print_node(out, g, *n, data);
  for (const GraphOutput& o : g.outputs()) {
    const std::string& value = g.node(o.node).name;
    if (o.name == value) {
      out += fmt::format("output {}\n", o.name);
    } else {
      out += fmt::format("output {} = {}\n", o.name, value);
    }
  }
  return out;
}

}  // namespace

std::string to_text(const Graph& g) {
  return print_graph(g, ConstantData::print);
}

std::string to_text_without_weights(const Graph& g) {
  return print_graph(g, ConstantData::as_input);
}

std::string graph_fingerprint(const Graph& g) {
  return print_graph(g, ConstantData::hash);
}

}  // namespace coil
