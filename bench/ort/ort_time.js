#!/usr/bin/env node
// ONNX Runtime as a benchmark anchor (docs/benchmarks.md, "Against ONNX Runtime"): the median
// time of InferenceSession.run on one model, at a given intra-op thread count, with random
// inputs of the model's declared shapes (symbolic dims: --dim NAME=VALUE, default 1).
//
//   node bench/ort/ort_time.js MODEL.onnx [--threads N] [--runs R] [--warmup W] [--dim n=1]
//                              [--profile PREFIX]
//
// Prints one JSON line: {"median_ms", "min_ms", "max_ms", "runs", "threads", "ort_version",
// "load_ms"}. The session is ORT's default CPU setup for serving: all graph optimizations,
// sequential execution, `intraOpNumThreads` N, `interOpNumThreads` 1, no thread spinning
// (coil's OpenMP threads do not spin either: OMP_WAIT_POLICY is passive in the benchmarks).
'use strict';
const ort = require('onnxruntime-node');
const fs = require('fs');

function parse(argv) {
  const a = {threads: 1, runs: 30, warmup: 5, dims: {}};
  for (let i = 0; i < argv.length; ++i) {
    const k = argv[i];
    const v = () => {
      if (i + 1 >= argv.length) throw new Error(`${k} needs a value`);
      return argv[++i];
    };
    if (k === '--threads') a.threads = parseInt(v(), 10);
    else if (k === '--runs') a.runs = parseInt(v(), 10);
    else if (k === '--warmup') a.warmup = parseInt(v(), 10);
    else if (k === '--profile') a.profile = v();
    else if (k === '--dim') {
      const [name, value] = v().split('=');
      a.dims[name] = parseInt(value, 10);
    } else if (k.startsWith('--')) throw new Error(`unknown option ${k}`);
    else a.model = k;
  }
  if (!a.model) throw new Error('usage: ort_time.js MODEL.onnx [--threads N] [--runs R]');
  if (!(a.threads >= 1 && a.runs >= 1 && a.warmup >= 0)) throw new Error('bad counts');
  return a;
}

const kTypes = {
  float32: Float32Array, float64: Float64Array, int64: BigInt64Array, int32: Int32Array,
  uint8: Uint8Array, int8: Int8Array, bool: Uint8Array,
};

function randomTensor(meta, dims) {
  const shape = meta.shape.map((d) => (typeof d === 'number' ? d : (dims[d] ?? 1)));
  const n = shape.reduce((x, y) => x * y, 1);
  const Type = kTypes[meta.type];
  if (!Type) throw new Error(`input ${meta.name}: dtype ${meta.type} not supported here`);
  const data = new Type(n);
  let seed = 12345;
  for (let i = 0; i < n; ++i) {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    const u = seed / 0x7fffffff;
    if (Type === BigInt64Array) data[i] = BigInt(Math.floor(u * 8));
    else if (Type === Float32Array || Type === Float64Array) data[i] = 2 * u - 1;
    else data[i] = Math.floor(u * 8);
  }
  return new ort.Tensor(meta.type, data, shape);
}

async function main() {
  const a = parse(process.argv.slice(2));
  const t0 = process.hrtime.bigint();
  const session = await ort.InferenceSession.create(fs.readFileSync(a.model), {
    executionProviders: ['cpu'],
    graphOptimizationLevel: 'all',
    executionMode: 'sequential',
    intraOpNumThreads: a.threads,
    interOpNumThreads: 1,
    extra: {session: {intra_op: {allow_spinning: '0'}}},
    // --profile PREFIX: ORT writes PREFIX_<date>.json, a Chrome trace with one event per node
    // and run (bench/ort/ort_profile.py sums it per node, to set beside `coil bench --profile`).
    ...(a.profile ? {enableProfiling: true, profileFilePrefix: a.profile} : {}),
  });
  const loadMs = Number(process.hrtime.bigint() - t0) / 1e6;
  const feeds = {};
  for (const meta of session.inputMetadata) feeds[meta.name] = randomTensor(meta, a.dims);
  for (let i = 0; i < a.warmup; ++i) await session.run(feeds);
  const times = [];
  for (let i = 0; i < a.runs; ++i) {
    const s = process.hrtime.bigint();
    await session.run(feeds);
    times.push(Number(process.hrtime.bigint() - s) / 1e6);
  }
  if (a.profile) session.endProfiling();
  times.sort((x, y) => x - y);
  const mid = times.length >> 1;
  const median = times.length % 2 ? times[mid] : (times[mid - 1] + times[mid]) / 2;
  console.log(JSON.stringify({
    median_ms: median, min_ms: times[0], max_ms: times[times.length - 1], runs: a.runs,
    threads: a.threads, ort_version: require('onnxruntime-node/package.json').version,
    load_ms: loadMs,
  }));
}

main().catch((e) => {
  console.error(`ort_time.js: ${e.message}`);
  process.exit(2);
});
