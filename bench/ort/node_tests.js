#!/usr/bin/env node
// ONNX Runtime on ONNX's backend node tests (issue 27's headline figure; driven by
// bench/onnx_node_tests.py, docs/benchmarks.md "ONNX node tests against ONNX Runtime").
//
//   node bench/ort/node_tests.js TESTDIR [TESTDIR ...]
//   node bench/ort/node_tests.js - < list      (one directory a line: for the whole set, since
//                                              node crashes at start with ~900 arguments)
//
// For each test directory (model.onnx, test_data_set_0/{input,output}_<i>.pb) it creates a
// session (ORT's default CPU setup, one intra-op thread), feeds every graph input from the
// input files at run time, and compares every output with the expected one: floats within
// |got - expected| <= atol + rtol * |expected| (rtol 1e-3, atol 1e-5, as coil's runner and ORT's
// own test runner), NaN equal to NaN, integers, bools and strings equal, dtype and shape equal.
// Prints one JSON line per test, flushed at once, so that the driver can restart after a crash:
//   {"test": "test_abs", "outcome": "pass" | "fail" | "error", "reason": "..."}
// The .pb files are parsed here (a minimal protobuf reader): onnxruntime-node exposes no
// TensorProto reader, and its JS API takes tensors only (sequence and optional values, and
// bfloat16 tensors, have no JS form: such tests are errors, with that reason).
'use strict';
const ort = require('onnxruntime-node');
const fs = require('fs');
const path = require('path');

const kRtol = 1e-3;
const kAtol = 1e-5;

// ---- a minimal protobuf reader -------------------------------------------------------------

class Reader {
  constructor(buf) {
    this.buf = buf;
    this.pos = 0;
  }
  done() {
    return this.pos >= this.buf.length;
  }
  varint() {  // as a BigInt: int64 fields need all 64 bits
    let result = 0n;
    let shift = 0n;
    for (;;) {
      if (this.pos >= this.buf.length) throw new Error('truncated varint');
      const b = this.buf[this.pos++];
      result |= BigInt(b & 0x7f) << shift;
      if ((b & 0x80) === 0) return result;
      shift += 7n;
    }
  }
  bytes() {
    const n = Number(this.varint());
    if (this.pos + n > this.buf.length) throw new Error('truncated field');
    const b = this.buf.subarray(this.pos, this.pos + n);
    this.pos += n;
    return b;
  }
  skip(wire) {
    if (wire === 0) this.varint();
    else if (wire === 1) this.pos += 8;
    else if (wire === 2) this.bytes();
    else if (wire === 5) this.pos += 4;
    else throw new Error(`wire type ${wire} not supported`);
  }
  // Each field of a message as [number, wire type, value] (value: BigInt varint, Buffer for
  // length-delimited, Buffer of 4 or 8 bytes for fixed).
  *fields() {
    while (!this.done()) {
      const key = this.varint();
      const field = Number(key >> 3n);
      const wire = Number(key & 7n);
      if (wire === 0) yield [field, wire, this.varint()];
      else if (wire === 2) yield [field, wire, this.bytes()];
      else if (wire === 1 || wire === 5) {
        const n = wire === 1 ? 8 : 4;
        yield [field, wire, this.buf.subarray(this.pos, this.pos + n)];
        this.pos += n;
      } else throw new Error(`wire type ${wire} not supported`);
    }
  }
}

// A repeated scalar field, packed (one length-delimited run) or not (one value per field).
function pushVarints(out, wire, value) {
  if (wire === 0) out.push(value);
  else {
    const r = new Reader(value);
    while (!r.done()) out.push(r.varint());
  }
}
function pushFixed(out, wire, value, size, read) {
  for (let off = 0; off + size <= value.length; off += size) out.push(read(value, off));
}

// TensorProto.DataType -> [ORT type name, typed array, bytes per element]
const kDataTypes = {
  1: ['float32', Float32Array, 4], 2: ['uint8', Uint8Array, 1], 3: ['int8', Int8Array, 1],
  4: ['uint16', Uint16Array, 2], 5: ['int16', Int16Array, 2], 6: ['int32', Int32Array, 4],
  7: ['int64', BigInt64Array, 8], 8: ['string', null, 0], 9: ['bool', Uint8Array, 1],
  10: ['float16', Uint16Array, 2], 11: ['float64', Float64Array, 8],
  12: ['uint32', Uint32Array, 4], 13: ['uint64', BigUint64Array, 8],
};
const kUnsupportedTypes = {14: 'complex64', 15: 'complex128', 16: 'bfloat16'};

// A TensorProto as an ort.Tensor (string tensors hold string[]).
function parseTensor(buf, what) {
  const dims = [];
  let dataType = 0;
  let raw = null;
  const floats = [], ints32 = [], ints64 = [], doubles = [], uints64 = [], strings = [];
  for (const [f, w, v] of new Reader(buf).fields()) {
    if (f === 1) pushVarints(dims, w, v);
    else if (f === 2) dataType = Number(v);
    else if (f === 4) pushFixed(floats, w, v, 4, (b, o) => b.readFloatLE(o));
    else if (f === 5) pushVarints(ints32, w, v);
    else if (f === 6) strings.push(Buffer.from(v).toString('utf8'));
    else if (f === 7) pushVarints(ints64, w, v);
    else if (f === 9) raw = v;
    else if (f === 10) pushFixed(doubles, w, v, 8, (b, o) => b.readDoubleLE(o));
    else if (f === 11) pushVarints(uints64, w, v);
    else if (f === 13 || f === 14) throw new Error(`${what}: external data not supported`);
  }
  if (kUnsupportedTypes[dataType])
    throw new Error(`${what}: dtype ${kUnsupportedTypes[dataType]} has no onnxruntime-node tensor`);
  const entry = kDataTypes[dataType];
  if (!entry) throw new Error(`${what}: unknown TensorProto data_type ${dataType}`);
  const [type, Array_, size] = entry;
  const shape = dims.map((d) => Number(BigInt.asIntN(64, d)));
  const n = shape.reduce((a, b) => a * b, 1);
  if (type === 'string') return new ort.Tensor('string', strings, shape);
  let data;
  if (raw) {
    if (raw.length !== n * size) throw new Error(`${what}: raw_data has ${raw.length} bytes`);
    // Copy: the Buffer may be unaligned for the typed array.
    data = new Array_(new Uint8Array(raw).buffer, 0, n);
  } else {
    data = new Array_(n);
    const src = floats.length ? floats : doubles.length ? doubles : ints64.length ? ints64 :
                uints64.length ? uints64 : ints32;
    if (src.length !== n) throw new Error(`${what}: ${src.length} values for ${n} elements`);
    for (let i = 0; i < n; ++i) {
      const v = src[i];
      if (Array_ === BigInt64Array) data[i] = BigInt.asIntN(64, v);
      else if (Array_ === BigUint64Array) data[i] = BigInt.asUintN(64, v);
      else if (typeof v === 'bigint') data[i] = Number(BigInt.asIntN(64, v));
      else data[i] = v;
    }
  }
  return new ort.Tensor(type, data, shape);
}

// A test data file: a TensorProto, or a SequenceProto / OptionalProto, which the JS API cannot
// feed. The file does not say which it is; the model's metadata does (`isTensor`).
function readValue(file, isTensor) {
  if (!isTensor) throw new Error(`${path.basename(file)}: a sequence or optional value, which ` +
                                 'onnxruntime-node cannot feed or return');
  return parseTensor(fs.readFileSync(file), path.basename(file));
}

// ---- comparison ----------------------------------------------------------------------------

function halfToFloat(h) {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

// null when `got` matches `want`, else why not.
function compare(name, got, want) {
  if (got.type !== want.type) return `output ${name}: got ${got.type}, expected ${want.type}`;
  const gs = JSON.stringify(got.dims), ws = JSON.stringify(want.dims);
  if (gs !== ws) return `output ${name}: got shape ${gs}, expected ${ws}`;
  const isFloat = ['float32', 'float64', 'float16'].includes(got.type);
  let bad = 0, first = -1;
  for (let i = 0; i < want.data.length; ++i) {
    let g = got.data[i], w = want.data[i];
    let ok;
    if (isFloat) {
      if (got.type === 'float16') { g = halfToFloat(g); w = halfToFloat(w); }
      if (Number.isNaN(w)) ok = Number.isNaN(g);
      else if (!Number.isFinite(w)) ok = g === w;
      else ok = Math.abs(g - w) <= kAtol + kRtol * Math.abs(w);
    } else {
      ok = g === w;
    }
    if (!ok) {
      if (first < 0) first = i;
      ++bad;
    }
  }
  if (bad === 0) return null;
  const fmt = (t, i) => (t.type === 'float16' ? halfToFloat(t.data[i]) : String(t.data[i]));
  return `output ${name}: ${bad} of ${want.data.length} elements differ (first at ${first}: ` +
         `got ${fmt(got, first)}, expected ${fmt(want, first)})`;
}

// ---- one test ------------------------------------------------------------------------------

function dataFiles(dir, prefix) {
  const files = [];
  for (let i = 0; fs.existsSync(path.join(dir, `${prefix}_${i}.pb`)); ++i)
    files.push(path.join(dir, `${prefix}_${i}.pb`));
  return files;
}

async function runTest(dir) {
  const session = await ort.InferenceSession.create(path.join(dir, 'model.onnx'), {
    intraOpNumThreads: 1, interOpNumThreads: 1, executionMode: 'sequential',
  });
  const data = path.join(dir, 'test_data_set_0');
  const inFiles = dataFiles(data, 'input');
  const outFiles = dataFiles(data, 'output');
  // Inputs by position among the graph inputs that are not initializers (ONNX's runner feeds
  // them so; ORT's inputNames are exactly those).
  if (inFiles.length > session.inputNames.length)
    throw new Error(`${inFiles.length} input files for ${session.inputNames.length} inputs`);
  const feeds = {};
  inFiles.forEach((f, i) => {
    feeds[session.inputNames[i]] = readValue(f, session.inputMetadata[i].isTensor);
  });
  if (outFiles.length !== session.outputNames.length)
    throw new Error(`${outFiles.length} output files for ${session.outputNames.length} outputs`);
  const want = outFiles.map((f, i) => readValue(f, session.outputMetadata[i].isTensor));
  const got = await session.run(feeds);
  const problems = [];
  session.outputNames.forEach((name, i) => {
    const p = compare(name, got[name], want[i]);
    if (p) problems.push(p);
  });
  await session.release();
  return problems.length ? {outcome: 'fail', reason: problems.join('; ')} : {outcome: 'pass'};
}

async function main() {
  let dirs = process.argv.slice(2);
  if (dirs.length === 1 && dirs[0] === '-')
    dirs = fs.readFileSync(0, 'utf8').split('\n').filter((l) => l.trim());
  if (!dirs.length) throw new Error('usage: node_tests.js TESTDIR [TESTDIR ...] | -');
  ort.env.logLevel = 'fatal';
  for (const dir of dirs) {
    let r;
    try {
      r = await runTest(dir);
    } catch (e) {
      r = {outcome: 'error', reason: String(e.message || e).split('\n')[0].slice(0, 400)};
    }
    fs.writeSync(1, JSON.stringify({test: path.basename(dir), ...r}) + '\n');
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
