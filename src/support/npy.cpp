#include "support/npy.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <string_view>

#include "support/check.h"

namespace coil {
namespace fs = std::filesystem;
namespace {

static_assert(std::endian::native == std::endian::little,
              "npy I/O assumes a little-endian host (data is copied without swapping)");

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;
// numpy itself refuses headers over 10000 bytes by default; this bound only keeps a garbage
// length field from making us allocate gigabytes.
constexpr uint32_t kMaxHeaderSize = 1u << 20;

[[noreturn]] void malformed(const fs::path& path, std::string_view what) {
  user_error("cannot read npy file {}: {}", path.string(), what);
}

// The .npy descr of each dtype, and back. bf16 has no numpy type: see npy.h.
std::string_view descr_of(DType dtype) {
  switch (dtype) {
    case DType::Bool:
      return "|b1";
    case DType::U8:
      return "|u1";
    case DType::I8:
      return "|i1";
    case DType::I32:
      return "<i4";
    case DType::I64:
      return "<i8";
    case DType::F16:
      return "<f2";
    case DType::BF16:
      return "|V2";
    case DType::F32:
      return "<f4";
    case DType::F64:
      return "<f8";
    case DType::I16:
      return "<i2";
    case DType::U16:
      return "<u2";
    case DType::U32:
      return "<u4";
    case DType::U64:
      return "<u8";
  }
  COIL_UNREACHABLE("bad dtype");
}

struct Descr {
  DType dtype;
  bool big_endian;
};

Descr parse_descr(const fs::path& path, const std::string& descr) {
  static constexpr std::pair<std::string_view, DType> kTypes[] = {
      {"b1", DType::Bool}, {"u1", DType::U8},  {"i1", DType::I8},  {"i4", DType::I32},
      {"i8", DType::I64},  {"f2", DType::F16}, {"f4", DType::F32}, {"f8", DType::F64},
      {"V2", DType::BF16}, {"i2", DType::I16}, {"u2", DType::U16}, {"u4", DType::U32},
      {"u8", DType::U64}};
  if (descr.size() >= 2 && std::string_view("<>|=").find(descr[0]) != std::string_view::npos) {
    std::string_view type = std::string_view(descr).substr(1);
    for (const auto& [name, dtype] : kTypes) {
      if (type == name) return {dtype, descr[0] == '>'};
    }
  }
  malformed(path, fmt::format("unsupported dtype '{}' (coil reads b1, u1, i1, i2, u2, i4, u4, "
                              "i8, u8, f2, f4, f8, and V2 as bf16)",
                              descr));
}

// The header is a Python dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// This parses exactly that grammar (any key order, either quote, optional trailing commas).
class HeaderParser {
 public:
  HeaderParser(const fs::path& path, std::string_view text) : path_(path), text_(text) {}

  struct Header {
    std::string descr;
    bool fortran_order = false;
    std::vector<int64_t> shape;
  };

  Header parse() {
    Header h;
    bool seen[3] = {false, false, false};
    expect('{');
    while (!consume('}')) {
      std::string key = parse_string();
      expect(':');
      int index = key == "descr" ? 0 : key == "fortran_order" ? 1 : key == "shape" ? 2 : -1;
      if (index < 0) fail(fmt::format("unknown header key '{}'", key));
      if (seen[index]) fail(fmt::format("header key '{}' appears twice", key));
      seen[index] = true;
      if (index == 0) {
        skip_space();
        if (pos_ < text_.size() && text_[pos_] == '[') {
          fail("structured dtypes (a descr list) are not supported");
        }
        h.descr = parse_string();
      } else if (index == 1) {
        h.fortran_order = parse_bool();
      } else {
        h.shape = parse_shape();
      }
      if (!consume(',')) {
        expect('}');
        break;
      }
    }
    skip_space();
    if (pos_ != text_.size()) fail("unexpected text after the header dict");
    if (!seen[0] || !seen[1] || !seen[2]) {
      fail("header lacks one of 'descr', 'fortran_order', 'shape'");
    }
    return h;
  }

 private:
  [[noreturn]] void fail(std::string_view what) {
    malformed(path_, fmt::format("bad header at byte {}: {}", pos_, what));
  }
  void skip_space() {
    while (pos_ < text_.size() && std::strchr(" \t\r\n", text_[pos_]) && text_[pos_]) ++pos_;
  }
  bool consume(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!consume(c)) fail(fmt::format("expected '{}'", c));
  }
  std::string parse_string() {
    skip_space();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) {
      fail("expected a quoted string");
    }
    char quote = text_[pos_++];
    size_t end = text_.find(quote, pos_);
    if (end == std::string_view::npos) fail("unterminated string");
    std::string s(text_.substr(pos_, end - pos_));
    if (s.find('\\') != std::string::npos) fail("escapes in strings are not supported");
    pos_ = end + 1;
    return s;
  }
  bool parse_bool() {
    skip_space();
    for (auto [word, value] : {std::pair{"True", true}, std::pair{"False", false}}) {
      if (text_.substr(pos_, std::strlen(word)) == word) {
        pos_ += std::strlen(word);
        return value;
      }
    }
    fail("expected True or False for 'fortran_order'");
  }
  std::vector<int64_t> parse_shape() {
    std::vector<int64_t> shape;
    expect('(');
    while (!consume(')')) {
      skip_space();
      int64_t v = 0;
      size_t start = pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
        if (v > (std::numeric_limits<int64_t>::max() - 9) / 10) fail("shape size too large");
        v = v * 10 + (text_[pos_++] - '0');
      }
      if (pos_ == start) fail("expected a non-negative integer in 'shape'");
      if (pos_ < text_.size() && text_[pos_] == 'L') ++pos_;  // Python 2 long literal
      shape.push_back(v);
      if (!consume(',')) {
        expect(')');
        break;
      }
    }
    return shape;
  }

  const fs::path& path_;
  std::string_view text_;
  size_t pos_ = 0;
};

void byte_swap(void* data, int64_t count, int size) {
  auto* p = static_cast<unsigned char*>(data);
  for (int64_t i = 0; i < count; ++i, p += size) std::reverse(p, p + size);
}

}  // namespace

Tensor read_npy(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) user_error("cannot open npy file {}: {}", path.string(), std::strerror(errno));
  auto read_exact = [&](void* dst, size_t n, std::string_view what) {
    in.read(static_cast<char*>(dst), static_cast<std::streamsize>(n));
    if (static_cast<size_t>(in.gcount()) != n) {
      malformed(path, fmt::format("file is truncated ({} ends early)", what));
    }
  };

  char magic[kMagicSize];
  read_exact(magic, kMagicSize, "magic string");
  if (std::memcmp(magic, kMagic, kMagicSize) != 0) malformed(path, "not an npy file (bad magic)");
  unsigned char version[2];
  read_exact(version, 2, "version");
  if (version[0] < 1 || version[0] > 3 || version[1] != 0) {
    malformed(path, fmt::format("unsupported format version {}.{}", version[0], version[1]));
  }
  // 1.0 has a 2-byte little-endian header length, 2.0 and 3.0 a 4-byte one.
  unsigned char len_bytes[4] = {0, 0, 0, 0};
  size_t len_size = version[0] == 1 ? 2 : 4;
  read_exact(len_bytes, len_size, "header length");
  uint32_t header_size = 0;
  for (size_t i = len_size; i-- > 0;) header_size = header_size << 8 | len_bytes[i];
  if (header_size > kMaxHeaderSize) {
    malformed(path, fmt::format("header length {} is implausibly large", header_size));
  }
  std::string header_text(header_size, '\0');
  read_exact(header_text.data(), header_size, "header");
  HeaderParser::Header header = HeaderParser(path, header_text).parse();
  Descr descr = parse_descr(path, header.descr);

  int esize = dtype_size(descr.dtype);
  int64_t numel = 1;
  for (int64_t s : header.shape) {
    if (s != 0 && numel > std::numeric_limits<int64_t>::max() / esize / s) {
      malformed(path, fmt::format("shape {} is too large", shape_str(header.shape)));
    }
    numel *= s;
  }
  // Check the size before allocating, so that a corrupt shape cannot ask for terabytes.
  uint64_t data_offset = kMagicSize + 2 + len_size + header_size;
  std::error_code ec;
  uint64_t file_size = fs::file_size(path, ec);
  if (ec) malformed(path, fmt::format("cannot get its size: {}", ec.message()));
  uint64_t data_bytes = static_cast<uint64_t>(numel) * esize;
  if (file_size < data_offset + data_bytes) {
    malformed(path, fmt::format("file is truncated: shape {} of {} needs {} data bytes, {} found",
                                shape_str(header.shape), dtype_name(descr.dtype), data_bytes,
                                file_size - std::min(file_size, data_offset)));
  }

  Tensor raw = Tensor::empty(descr.dtype, header.shape);
  read_exact(raw.data(), data_bytes, "data");
  if (descr.big_endian && esize > 1) byte_swap(raw.data(), numel, esize);
  if (descr.dtype == DType::Bool) {
    // Any nonzero byte is true in numpy; a C++ bool must hold exactly 0 or 1.
    auto* p = raw.data_as<unsigned char>();
    for (int64_t i = 0; i < numel; ++i) p[i] = p[i] != 0;
  }
  if (!header.fortran_order || header.shape.size() < 2) return raw;
  // Column-major data: view it with Fortran strides and copy into C order.
  std::vector<int64_t> strides(header.shape.size());
  int64_t stride = 1;
  for (size_t d = 0; d < header.shape.size(); ++d) {
    strides[d] = stride;
    stride *= std::max<int64_t>(header.shape[d], 1);
  }
  return raw.strided(header.shape, strides).clone();
}

void write_npy(const fs::path& path, const Tensor& tensor) {
  COIL_USER_CHECK(tensor.defined(), "cannot write an undefined tensor to npy file {}",
                  path.string());
  Tensor t = tensor.is_contiguous() ? tensor : tensor.clone();
  std::string shape = fmt::format("{}", fmt::join(t.shape(), ", "));
  if (t.dim() == 1) shape += ',';  // a one-element Python tuple: (3,)
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}",
                                   descr_of(t.dtype()), shape);
  // Pad with spaces and end with '\n' so that the data starts at a multiple of 64 bytes.
  bool v1 = header.size() + 1 + 10 + 64 <= 0xffff;
  size_t prefix = v1 ? 10 : 12;
  header.append(63 - (prefix + header.size()) % 64, ' ');
  header += '\n';

  std::string head(kMagic, kMagicSize);
  head += static_cast<char>(v1 ? 1 : 2);
  head += '\0';
  uint32_t len = static_cast<uint32_t>(header.size());
  for (size_t i = 0; i < prefix - 8; ++i) head += static_cast<char>((len >> (8 * i)) & 0xff);
  head += header;

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(head.data(), static_cast<std::streamsize>(head.size()));
  out.write(static_cast<const char*>(t.data()),
            static_cast<std::streamsize>(t.numel() * dtype_size(t.dtype())));
  out.close();
  COIL_USER_CHECK(out.good(), "cannot write npy file {}: {}", path.string(), std::strerror(errno));
}

}  // namespace coil
