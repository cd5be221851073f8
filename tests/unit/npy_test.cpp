// .npy reading and writing: round trips of every dtype, interchange with numpy in both
// directions, and malformed files.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <gtest/gtest.h>

#include "coil/error.h"
#include "support/check.h"
#include "support/npy.h"

namespace coil {
namespace {

namespace fs = std::filesystem;

constexpr DType kAllDTypes[] = {DType::Bool, DType::U8,  DType::I8,  DType::I16, DType::U16,
                                DType::I32,  DType::U32, DType::I64, DType::U64, DType::F16,
                                DType::BF16, DType::F32, DType::F64};

// A distinct, exactly representable value for element i of each dtype.
double sample(DType dtype, int64_t i) {
  switch (dtype) {
    case DType::Bool:
      return i % 3 == 0;
    case DType::U8:
      return static_cast<double>(i * 37 % 256);
    case DType::I8:
      return static_cast<double>(i * 37 % 256 - 128);
    case DType::I32:
      return static_cast<double>(i * 100003 - 5);
    case DType::I64:
      return static_cast<double>(i) * 1e12 - 7;
    case DType::I16:
      return static_cast<double>(i * 4099 % 65536 - 32768);
    case DType::U16:
      return static_cast<double>(i * 4099 % 65536);
    case DType::U32:
      return static_cast<double>(i) * 100000007 + 3;
    case DType::U64:
      return static_cast<double>(i) * 0x1p60 + 9;  // beyond int64 from i = 8
    case DType::F16:
      return (static_cast<double>(i) - 3) * 0.5;
    case DType::BF16:
      return (static_cast<double>(i) - 3) * 0.25;
    case DType::F32:
      return static_cast<double>(static_cast<float>(i * 0.1));
    case DType::F64:
      return i * 0.1 + 1e-3;
  }
  return 0;
}

Tensor filled(DType dtype, std::vector<int64_t> shape) {
  Tensor t = Tensor::empty(dtype, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.set_from_double(i, sample(dtype, i));
  return t;
}

void expect_same(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.dtype(), b.dtype());
  ASSERT_EQ(a.shape(), b.shape());
  for (int64_t i = 0; i < a.numel(); ++i) {
    ASSERT_EQ(a.item_as_double(i), b.item_as_double(i)) << "element " << i;
  }
}

class NpyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    dir_ = fs::path(COIL_BINARY_DIR) / "test-npy" / fmt::format("{}-{}", name, ::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    if (!HasFailure()) fs::remove_all(dir_, ec);  // kept on failure, for a look
  }

  // Runs a Python script with numpy imported as np; returns its exit status.
  int python(const std::string& script) {
    fs::path file = dir_ / "script.py";
    std::ofstream(file) << "import sys\nimport numpy as np\n" << script;
    std::string cmd = fmt::format("'{}' '{}'", COIL_PYTHON, file.string());
    int status = std::system(cmd.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  void write_bytes(const fs::path& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }

  fs::path dir_;
};

TEST_F(NpyTest, RoundTripEveryDType) {
  for (DType dtype : kAllDTypes) {
    for (std::vector<int64_t> shape : {std::vector<int64_t>{2, 3, 4}, {7}, {}, {0, 3}}) {
      SCOPED_TRACE(fmt::format("{} {}", dtype_name(dtype), shape_str(shape)));
      Tensor t = filled(dtype, shape);
      fs::path file = dir_ / "t.npy";
      write_npy(file, t);
      // The data starts at a multiple of 64 bytes, as numpy writes it.
      EXPECT_EQ((fs::file_size(file) - t.numel() * dtype_size(dtype)) % 64, 0u);
      expect_same(read_npy(file), t);
    }
  }
}

TEST_F(NpyTest, NonContiguousTensorsAreWrittenInCOrder) {
  Tensor t = filled(DType::F32, {2, 3});
  Tensor transposed = t.strided({3, 2}, {1, 3});
  write_npy(dir_ / "t.npy", transposed);
  expect_same(read_npy(dir_ / "t.npy"), transposed.clone());
}

TEST_F(NpyTest, NumpyReadsWhatCoilWrites) {
  std::string script;
  for (DType dtype : kAllDTypes) {
    Tensor t = filled(dtype, {2, 3, 4});
    fs::path file = dir_ / fmt::format("{}.npy", dtype_name(dtype));
    write_npy(file, t);
    std::string values;
    for (int64_t i = 0; i < t.numel(); ++i) values += fmt::format("{:.17g},", t.item_as_double(i));
    std::string descr =
        dtype == DType::BF16   ? "|V2"
        : dtype == DType::Bool ? "|b1"
        : dtype == DType::U8   ? "|u1"
        : dtype == DType::I8
            ? "|i1"
            : fmt::format("<{}{}", dtype_name(dtype)[0] == 'b' ? 'f' : dtype_name(dtype)[0],
                          dtype_size(dtype));
    // bf16 arrives as raw 2-byte voids: reinterpret the bits as the top half of a float32.
    std::string as_f64 = dtype == DType::BF16
                             ? "(a.view('<u2').astype('<u4') << 16).view('<f4').astype('f8')"
                             : "a.astype('f8')";
    script += fmt::format(
        "a = np.load('{}')\n"
        "assert a.dtype.str == '{}', ('{}', a.dtype.str)\n"
        "assert a.shape == (2, 3, 4), a.shape\n"
        "assert a.flags.c_contiguous\n"
        "assert np.array_equal({}.ravel(), np.array([{}], dtype='f8')), ('{}', a)\n",
        file.string(), descr, dtype_name(dtype), as_f64, values, dtype_name(dtype));
  }
  write_npy(dir_ / "scalar.npy", filled(DType::F64, {}));
  write_npy(dir_ / "empty.npy", filled(DType::I32, {0, 5}));
  script +=
      "s = np.load(sys.argv[0].replace('script.py', 'scalar.npy'))\n"
      "assert s.shape == () and s[()] == 0.001, s\n"
      "e = np.load(sys.argv[0].replace('script.py', 'empty.npy'))\n"
      "assert e.shape == (0, 5) and e.dtype == np.int32, e\n";
  EXPECT_EQ(python(script), 0);
}

TEST_F(NpyTest, CoilReadsWhatNumpyWrites) {
  std::string d = dir_.string();
  ASSERT_EQ(
      python(fmt::format(
          "d = '{}'\n"
          "for t in ['?', 'u1', 'i1', '<i4', '<i8', '<f2', '<f4', '<f8']:\n"
          "    np.save(d + '/' + t.strip('<') + '.npy', (np.arange(6) % 5).astype(t).reshape(2, "
          "3))\n"
          "np.save(d + '/fortran.npy', np.asfortranarray(np.arange(24.0).reshape(2, 3, 4)))\n"
          "for t in ['>i4', '>f8', '>f2', '>i8']:\n"
          "    np.save(d + '/be' + t[1:] + '.npy', np.arange(6, dtype=t).reshape(3, 2))\n"
          "np.save(d + '/empty.npy', np.zeros((0, 3), dtype='<f4'))\n"
          "np.save(d + '/scalar.npy', np.array(3.5, dtype='<f4'))\n"
          "np.save(d + '/bf16.npy', np.array([0x3f80, 0x4000, 0xc040], dtype='<u2').view('V2'))\n"
          "np.save(d + '/bool2.npy', np.array([0, 2, 1], dtype='u1').view('?'))\n"
          "for v in [(2, 0), (3, 0)]:\n"
          "    with open(d + '/v%d.npy' % v[0], 'wb') as f:\n"
          "        np.lib.format.write_array(f, np.arange(4, dtype='<i8'), version=v)\n",
          d)),
      0);
  struct Case {
    const char* file;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<double> values;
  };
  std::vector<double> mod5 = {0, 1, 2, 3, 4, 0};
  std::vector<double> iota6 = {0, 1, 2, 3, 4, 5};
  std::vector<double> iota24;
  for (int i = 0; i < 24; ++i) iota24.push_back(i);
  std::vector<Case> cases = {
      {"?.npy", DType::Bool, {2, 3}, {0, 1, 1, 1, 1, 0}},
      {"u1.npy", DType::U8, {2, 3}, mod5},
      {"i1.npy", DType::I8, {2, 3}, mod5},
      {"i4.npy", DType::I32, {2, 3}, mod5},
      {"i8.npy", DType::I64, {2, 3}, mod5},
      {"f2.npy", DType::F16, {2, 3}, mod5},
      {"f4.npy", DType::F32, {2, 3}, mod5},
      {"f8.npy", DType::F64, {2, 3}, mod5},
      {"fortran.npy", DType::F64, {2, 3, 4}, iota24},
      {"bei4.npy", DType::I32, {3, 2}, iota6},
      {"bef8.npy", DType::F64, {3, 2}, iota6},
      {"bef2.npy", DType::F16, {3, 2}, iota6},
      {"bei8.npy", DType::I64, {3, 2}, iota6},
      {"empty.npy", DType::F32, {0, 3}, {}},
      {"scalar.npy", DType::F32, {}, {3.5}},
      {"bf16.npy", DType::BF16, {3}, {1, 2, -3}},
      {"bool2.npy", DType::Bool, {3}, {0, 1, 1}},
      {"v2.npy", DType::I64, {4}, {0, 1, 2, 3}},
      {"v3.npy", DType::I64, {4}, {0, 1, 2, 3}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file);
    Tensor t = read_npy(dir_ / c.file);
    EXPECT_EQ(t.dtype(), c.dtype);
    ASSERT_EQ(t.shape(), c.shape);
    EXPECT_TRUE(t.is_contiguous());
    for (int64_t i = 0; i < t.numel(); ++i) EXPECT_EQ(t.item_as_double(i), c.values[i]) << i;
    if (c.dtype == DType::Bool) {
      // Stored as exactly 0 or 1, whatever nonzero byte numpy had.
      for (int64_t i = 0; i < t.numel(); ++i) EXPECT_LE(t.data_as<uint8_t>()[i], 1);
    }
  }
}

// A hand-made .npy file: magic, version, header length, header, then `data`.
std::string npy_bytes(const std::string& header, const std::string& data = "", int major = 1) {
  std::string out("\x93NUMPY", 6);
  out += static_cast<char>(major);
  out += '\0';
  uint32_t len = static_cast<uint32_t>(header.size());
  for (int i = 0; i < (major == 1 ? 2 : 4); ++i) out += static_cast<char>((len >> (8 * i)) & 0xff);
  return out + header + data;
}

TEST_F(NpyTest, MalformedFilesThrow) {
  fs::path file = dir_ / "bad.npy";
  auto expect_error = [&](const std::string& bytes, const std::string& why) {
    write_bytes(file, bytes);
    try {
      read_npy(file);
      ADD_FAILURE() << "no error for " << why;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  std::string f4 = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\n";
  expect_error("", "truncated");
  expect_error("garbage, not numpy at all", "bad magic");
  expect_error(npy_bytes(f4, std::string(8, '\0'), 4), "unsupported format version 4.0");
  expect_error(npy_bytes(f4, std::string(7, '\0')), "truncated");
  expect_error(npy_bytes("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }"), "'<c8'");
  expect_error(npy_bytes("{'descr': '<m8', 'fortran_order': False, 'shape': (2,), }"), "'<m8'");
  expect_error(npy_bytes("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,)}"),
               "structured");
  expect_error(npy_bytes("{'descr': '<f4', 'shape': (2,), }"), "lacks");
  expect_error(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}"),
               "unknown header key");
  expect_error(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }"),
               "non-negative integer");
  expect_error(npy_bytes("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,), }"),
               "True or False");
  expect_error(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000, "
                         "1000000000000), }"),
               "too large");
  expect_error(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (100000000000,), }"),
               "truncated");
  expect_error(npy_bytes("{'descr': '<f4, 'fortran_order': False, 'shape': (2,), }"), "bad header");
  expect_error(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,) "), "bad header");
  EXPECT_THROW(read_npy(dir_ / "missing.npy"), Error);
}

TEST_F(NpyTest, EveryTruncationAndByteFlipIsAnErrorOrAValidRead) {
  fs::path good = dir_ / "good.npy";
  write_npy(good, filled(DType::F32, {2, 3}));
  std::ifstream in(good, std::ios::binary);
  std::string bytes(std::istreambuf_iterator<char>(in), {});
  fs::path file = dir_ / "bad.npy";
  for (size_t n = 0; n < bytes.size(); ++n) {
    write_bytes(file, bytes.substr(0, n));
    EXPECT_THROW(read_npy(file), Error) << "prefix of " << n << " bytes";
  }
  // Random damage to the header: never a crash or another exception type.
  std::mt19937 rng(1234);
  size_t header_end = bytes.size() - 6 * 4;
  for (int round = 0; round < 200; ++round) {
    std::string damaged = bytes;
    for (int k = 0; k < 3; ++k) damaged[rng() % header_end] = static_cast<char>(rng());
    write_bytes(file, damaged);
    try {
      read_npy(file);
    } catch (const Error&) {
    }
  }
}

}  // namespace
}  // namespace coil
