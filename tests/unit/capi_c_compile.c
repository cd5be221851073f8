/* The C ABI's header is valid C (C99, -Wpedantic -Werror): this file includes it, builds a
 * graph, compiles it and runs it on a strided input through libcoil_c.so, then exports it to a
 * temporary directory, loads the export and runs that. Exit 0 on success. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coil/coil_c.h"

static int fail(const char* what) {
  fprintf(stderr, "capi_c_compile: %s: %s\n", what, coil_last_error());
  return 1;
}

int main(void) {
  coil_graph* g = NULL;
  coil_model* m = NULL;
  int32_t x = -1, y = -1;
  /* x is read transposed: element [i, j] of the [2, 3] input is data[j * 2 + i]. */
  float data[6] = {1, -4, -2, 5, 3, -6};
  const int64_t shape[2] = {2, 3};
  const int64_t strides[2] = {1, 2};
  float out[6] = {0};
  const float expected[6] = {1, 0, 3, 0, 5, 0};
  coil_tensor in_t;
  coil_tensor out_t;
  int i;

  if (coil_abi_version() != COIL_C_ABI_VERSION) return fail("abi version");
  if (strncmp(coil_version(), "coil ", 5) != 0) return fail("version");
  if (coil_graph_new(&g) != COIL_OK) return fail("coil_graph_new");
  if (coil_graph_add_input(g, "x", "f32[2, 3]", &x) != COIL_OK) return fail("add_input");
  if (coil_graph_add_node(g, "relu", &x, 1, NULL, "y", &y) != COIL_OK) return fail("add_node");
  if (coil_graph_add_output(g, y, NULL) != COIL_OK) return fail("add_output");
  if (coil_compile(g, "{\"autotune\": false}", &m) != COIL_OK) return fail("coil_compile");
  coil_graph_free(g);

  in_t.data = data;
  in_t.dtype = "f32";
  in_t.ndim = 2;
  in_t.shape = shape;
  in_t.strides = strides;
  out_t = in_t;
  out_t.data = out;
  out_t.strides = NULL;
  if (coil_model_run(m, &in_t, 1, &out_t, 1) != COIL_OK) return fail("coil_model_run");
  for (i = 0; i < 6; ++i)
    if (out[i] != expected[i]) return fail("wrong output");
  /* An error is a status and a message, never a crash. */
  if (coil_model_run(m, NULL, 1, &out_t, 1) != COIL_ERROR_INPUT) return fail("NULL inputs");
  if (strstr(coil_last_error(), "inputs is NULL") == NULL) return fail("NULL inputs message");

  {
    /* The export, loaded as a model of its own, gives the same values. */
    char dir[] = "/tmp/coil_capi_export_XXXXXX";
    char path[64];
    const char* files[3] = {"manifest.json", "module.so", "weights.bin"};
    coil_model* loaded = NULL;
    if (mkdtemp(dir) == NULL) return fail("mkdtemp");
    if (coil_model_export(m, dir) != COIL_OK) return fail("coil_model_export");
    if (coil_model_load(dir, &loaded) != COIL_OK) return fail("coil_model_load");
    memset(out, 0, sizeof out);
    if (coil_model_run(loaded, &in_t, 1, &out_t, 1) != COIL_OK) return fail("run the export");
    for (i = 0; i < 6; ++i)
      if (out[i] != expected[i]) return fail("wrong output from the export");
    if (strstr(coil_model_report_json(loaded), "\"exported\": true") == NULL)
      return fail("the export's report");
    if (coil_model_export(loaded, dir) != COIL_ERROR_INPUT) return fail("export of an export");
    coil_model_free(loaded);
    for (i = 0; i < 3; ++i) {
      snprintf(path, sizeof path, "%s/%s", dir, files[i]);
      unlink(path);
    }
    if (coil_model_load(dir, &loaded) != COIL_ERROR_INPUT || loaded != NULL)
      return fail("loading an empty directory");
    if (strstr(coil_last_error(), "no manifest.json") == NULL) return fail("its message");
    rmdir(dir);
  }
  coil_model_free(m);
  printf("ok: %s\n", coil_version());
  return 0;
}
