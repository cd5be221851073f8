/* coil's C ABI: parse or build a graph, compile it, run it on caller-owned memory.
 *
 * One shared library (libcoil_c.so, built beside libcoil_extern in build/lib) serves every
 * language that can call C: Python loads it with ctypes (python/coil/_capi.py), so no build per
 * Python version is needed. The C++ API (coil/coil.h) stays the primary interface; this is a
 * thin, stable layer over it.
 *
 * Conventions
 *   - Every function that can fail returns a coil_status; COIL_OK is 0, the others are the CLI's
 *     exit codes (docs/errors.md). The message of the last failure on the calling thread is
 *     coil_last_error() (valid until the thread's next failing call).
 *   - Handles (coil_graph, coil_model) are owned by the caller and freed with their _free
 *     function (NULL is accepted). A model does not refer to the graph it was compiled from.
 *   - Strings returned through `char**` are allocated by coil; free them with coil_free_string.
 *     Strings returned as `const char*` belong to the handle they came from.
 *   - dtypes are coil's names ("f32", "bf16", "i64", "bool", ... as in the text format).
 *   - No function throws or aborts: C++ exceptions are turned into statuses at this boundary.
 *   - A model may be run from several threads at once (each run with buffers of its own).
 */
#ifndef COIL_COIL_C_H
#define COIL_COIL_C_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define COIL_C_API __attribute__((visibility("default")))
#else
#define COIL_C_API
#endif

/* Bumped when a function's meaning or signature changes; coil_abi_version() returns it. */
#define COIL_C_ABI_VERSION 1

typedef enum coil_status {
  COIL_OK = 0,
  COIL_ERROR_INPUT = 2,       /* bad graph, option, shape, dtype or tensor: coil::Error */
  COIL_ERROR_UNSUPPORTED = 3, /* valid, but coil cannot do it (yet): coil::UnsupportedError */
  COIL_ERROR_INTERNAL = 4     /* a bug in coil: coil::InternalError or any other exception */
} coil_status;

typedef struct coil_graph coil_graph;
typedef struct coil_model coil_model;

/* A tensor in caller-owned memory: element [i0, i1, ...] is at
 * (char*)data + (i0 * strides[0] + i1 * strides[1] + ...) * element size.
 * Strides are in elements (as torch's), may be 0 (broadcast) and, for inputs, negative; an
 * output's are >= 0, and 0 only for dims of size 1. `data` may be NULL when the tensor has no
 * elements. */
typedef struct coil_tensor {
  void* data;
  const char* dtype; /* "f32", ... */
  int32_t ndim;
  const int64_t* shape;   /* ndim sizes */
  const int64_t* strides; /* ndim strides in elements; NULL means contiguous (row-major) */
} coil_tensor;

COIL_C_API int32_t coil_abi_version(void);
/* "coil 0.1.0 (commit abc1234, Release build)": what `coil --version` prints first. */
COIL_C_API const char* coil_version(void);
/* The message of this thread's last failed call ("" if none). */
COIL_C_API const char* coil_last_error(void);
COIL_C_API void coil_free_string(char* s);

/* ---- graphs ---------------------------------------------------------------------------- */

/* An empty graph, to build with the functions below (coil::Graph::add_input, add_node,
 * add_constant and add_output underneath). */
COIL_C_API coil_status coil_graph_new(coil_graph** out);
/* Parses coil's text format (docs/text-format.md). `source_name` names the text in error
 * messages ("model.coil"; NULL: "<text>"). */
COIL_C_API coil_status coil_graph_parse(const char* text, const char* source_name,
                                        coil_graph** out);
/* Imports an ONNX model from a file. */
COIL_C_API coil_status coil_graph_import_onnx(const char* path, coil_graph** out);
/* The graph in the text format (what coil_graph_parse reads back). */
COIL_C_API coil_status coil_graph_to_text(const coil_graph* graph, char** out);

/* A graph input; `type` in the text format's syntax, sizes may be symbols: "f32[s0, 128]".
 * `*id` receives the value's id (NULL: not wanted). */
COIL_C_API coil_status coil_graph_add_input(coil_graph* graph, const char* name, const char* type,
                                            int32_t* id);
/* A node: op `op` of coil's op table (`coil ops`) applied to `num_inputs` values, with
 * attributes in the text format's syntax ("{axes=[1], keepdim=true}"; NULL or "": none).
 * `name` may be NULL (coil names it). Types are inferred and checked at once: an unknown op,
 * an unknown attribute, a wrong arity or mismatched shapes is COIL_ERROR_INPUT naming the node. */
COIL_C_API coil_status coil_graph_add_node(coil_graph* graph, const char* op, const int32_t* inputs,
                                           int32_t num_inputs, const char* attrs, const char* name,
                                           int32_t* id);
/* A constant (weights, captured tensors) copied from caller memory (any strides). `name` may be
 * NULL (coil names it). */
COIL_C_API coil_status coil_graph_add_constant(coil_graph* graph, const char* name,
                                               const coil_tensor* value, int32_t* id);
/* Marks value `id` as a graph output named `name` (NULL: the value's name). */
COIL_C_API coil_status coil_graph_add_output(coil_graph* graph, int32_t id, const char* name);
/* The inferred type of value `id` in the text format's syntax ("f32[4, s0]"). */
COIL_C_API coil_status coil_graph_value_type(const coil_graph* graph, int32_t id, char** type);
COIL_C_API void coil_graph_free(coil_graph* graph);

/* ---- compiling ------------------------------------------------------------------------- */

/* Compiles for the CPU. Sizes that "sizes" leaves unbound make a size-generic model: one model
 * for every size, compiled per new size tuple at its first call (docs/dynamic-shapes.md); its
 * report is {"size_generic": true, "symbols": [...]}. `options_json` is a JSON object (NULL or
 * "" for the defaults) with any
 * of CompileOptions' fields (coil/coil.h): {"sizes": {"s0": 128}, "isa": "avx512",
 * "fusion": true, "store_all_intermediates": false, "autotune": true, "device": "cpu",
 * "precision": "highest", "output_dir": "DIR", "debug_dir": "DIR", "write_graph": false,
 * "mode": "default", "remote_cache": "redis://HOST:PORT/DB"}. An unknown key or a value of the
 * wrong type is COIL_ERROR_INPUT naming it. */
COIL_C_API coil_status coil_compile(const coil_graph* graph, const char* options_json,
                                    coil_model** out);
/* Generates the Triton module for the GPU (options' "device" must be "cuda" or absent):
 * `module_source` receives module.py's text, `report_json` the report (either may be NULL). */
COIL_C_API coil_status coil_generate_gpu_module(const coil_graph* graph, const char* options_json,
                                                char** module_source, char** report_json);
COIL_C_API void coil_model_free(coil_model* model);

/* ---- compiled models ------------------------------------------------------------------- */

/* The number of inputs, outputs; -1 for a NULL model (coil_last_error() says so). */
COIL_C_API int32_t coil_model_num_inputs(const coil_model* model);
COIL_C_API int32_t coil_model_num_outputs(const coil_model* model);
/* Name, dtype and shape of input (is_output = 0) or output (1) number `index`; -1 for a dim of
 * a size-generic model that depends on a size left unbound (coil_model_output_shape gives a
 * call's). The pointers stay valid as long as the model; a NULL `name`, `dtype`, `ndim` or
 * `shape` is not wanted. */
COIL_C_API coil_status coil_model_value_info(const coil_model* model, int32_t is_output,
                                             int32_t index, const char** name, const char** dtype,
                                             int32_t* ndim, const int64_t** shape);
/* The shape of output `index` for a call on `inputs` (all of them, as coil_model_run takes):
 * a size-generic model's sizes are bound from the inputs' shapes. `shape` receives at most
 * `capacity` sizes and `*ndim` the rank (COIL_ERROR_INPUT when the rank is over capacity). */
COIL_C_API coil_status coil_model_output_shape(const coil_model* model, const coil_tensor* inputs,
                                               int32_t num_inputs, int32_t index, int32_t* ndim,
                                               int64_t* shape, int32_t capacity);
/* Every output's shape for a call on `inputs` at once (the sizes bound once, not once per
 * output as coil_model_output_shape does): output i's rank goes to ndims[i] (`num_outputs` must
 * be the model's count) and its sizes, output after output, to `shapes`, which receives at
 * most `capacity` sizes in all (COIL_ERROR_INPUT when they need more). */
COIL_C_API coil_status coil_model_output_shapes(const coil_model* model, const coil_tensor* inputs,
                                                int32_t num_inputs, int32_t* ndims,
                                                int32_t num_outputs, int64_t* shapes,
                                                int32_t capacity);
/* The compile report as JSON (report.json; owned by the model); for a model from
 * coil_model_load, what its manifest says ({"exported": true, "isa": ..., "kernels": [...],
 * "module_bytes": ..., "weights_bytes": ..., "load_seconds": ...}). NULL for a NULL model. */
COIL_C_API const char* coil_model_report_json(const coil_model* model);

/* Runs the model: one tensor per input and per output, in order, each with the declared dtype
 * and shape. Inputs are read in place when contiguous (copied otherwise); contiguous outputs
 * are written in place, others through a temporary and a strided copy. Outputs must not alias
 * inputs or each other (an overlap that coil can see is COIL_ERROR_INPUT: a contiguous output
 * with a contiguous input, or two outputs of which one is contiguous). */
COIL_C_API coil_status coil_model_run(const coil_model* model, const coil_tensor* inputs,
                                      int32_t num_inputs, const coil_tensor* outputs,
                                      int32_t num_outputs);

/* ---- exported models (docs/deploy.md) --------------------------------------------------- */

/* Writes a compiled model to directory `dir` as `coil export` does (manifest.json, module.so,
 * weights.bin), for coil_model_load, `coil run DIR` or coil::ExportedModel (libcoil_runtime)
 * to run with no compiler. COIL_ERROR_INPUT for a model that was itself loaded. */
COIL_C_API coil_status coil_model_export(const coil_model* model, const char* dir);
/* Loads an exported model: no compiler, graph or cache is used. The manifest's format, coil
 * version and CPU features and the files' checksums are checked (COIL_ERROR_INPUT naming the
 * file and what differs). The model then runs as a compiled one (coil_model_run, ...). */
COIL_C_API coil_status coil_model_load(const char* dir, coil_model** out);

/* OpenMP threads of compiled kernels in this process (0: leave as is). */
COIL_C_API coil_status coil_set_num_threads(int32_t n);

#ifdef __cplusplus
}
#endif

#endif /* COIL_COIL_C_H */
