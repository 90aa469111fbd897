/* Unit tests of the summary writer (agent/summary.c): layout, atomic file, error reporting. */
#include <errno.h>
#include <sys/stat.h>

#include "agent/aggregate.h"
#include "agent/alloc_map.h"
#include "agent/config.h"
#include "agent/corr.h"
#include "agent/summary.h"
#include "export/json.h"
#include "unit.h"

static char *read_file(const char *path)
{
  static char buf[65536];
  FILE *f = fopen(path, "r");
  size_t n;

  if (!f)
    return NULL;
  n = fread(buf, 1, sizeof(buf) - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

struct mem {
  char buf[65536];
  size_t len;
};

static int mem_sink(void *ctx, const char *d, size_t n)
{
  struct mem *m = ctx;
  if (m->len + n >= sizeof(m->buf))
    return -ENOSPC;
  memcpy(m->buf + m->len, d, n);
  m->len += n;
  m->buf[m->len] = '\0';
  return 0;
}

static void test_active_layout(void)
{
  struct config cfg;
  struct corr_table *t = corr_table_new(1024);
  struct aggregate *a = aggregate_new(t);
  struct alloc_map *m = alloc_map_new(0);
  struct alloc_map_stats st;
  struct summary_input in;
  struct corr_info ci = {
      .corr_id = 5, .domain = CORR_DOMAIN_RUNTIME, .api_name = "cudaLaunchKernel_v7000"};
  struct alloc_info ai = {.size = 8192, .device = 0, .kind = ALLOC_KIND_DEVICE};
  struct event ev = {.kind = EVENT_KERNEL,
                     .start_ns = 1000,
                     .end_ns = 3000,
                     .device = 0,
                     .context = 1,
                     .stream = 13,
                     .corr_id = 5};
  struct mem out = {.len = 0};
  struct json_writer *w;

  config_defaults(&cfg);
  corr_table_enter(t, &ci);
  ev.u.kernel.name = "_Z6addOnePfi";
  aggregate_event(a, &ev, NULL);
  ev.kind = EVENT_MEMCPY;
  ev.u.memcpy.copy_kind = EVENT_COPY_DTOH;
  ev.u.memcpy.bytes = 4096;
  aggregate_event(a, &ev, NULL);
  alloc_map_insert(m, ALLOC_SPACE_VA, 0x1000, &ai);
  alloc_map_remove(m, ALLOC_SPACE_VA, 0x1000, NULL);
  alloc_map_remove(m, ALLOC_SPACE_VA, 0x2000, NULL);
  alloc_map_get_stats(m, &st);

  memset(&in, 0, sizeof(in));
  in.cfg = &cfg;
  in.pid = 1234;
  in.active = 1;
  in.inactive_reason = "";
  in.cupti_version = 130001;
  in.cupti_path = "/usr/local/cuda/lib64/libcupti.so.13";
  in.api.api_runtime = 12;
  in.api.api_driver = 30;
  in.agg = a;
  in.mem = &st;
  in.worker.dropped_records = 3;
  in.buffer_pool_exhausted = 2;

  w = json_writer_new(mem_sink, &out, JSON_COMPACT);
  CHECK_EQ(summary_write_json(&in, w), 0);
  json_writer_free(w);
  CHECK_STR(
      out.buf,
      "{\"version\":1,\"agent_version\":\"0.1.0\",\"pid\":1234,\"state\":\"active\",\"inactive_"
      "reason\":\"\","
      "\"cupti_version\":130001,\"cupti_path\":\"/usr/local/cuda/lib64/libcupti.so.13\","
      "\"window\":{\"start_ns\":1000,\"end_ns\":3000},\"api\":{\"runtime\":12,\"driver\":30},"
      "\"kernels\":{\"count\":1,\"gpu_time_ns\":2000,\"by_name\":[{\"name\":\"_Z6addOnePfi\","
      "\"demangled\":\"addOne(float*, int)\",\"count\":1,"
      "\"gpu_time_ns\":2000,\"apis\":{\"cudaLaunchKernel\":1},\"devices\":[0],\"streams\":[[0,1,13]"
      "]}]},"
      "\"streams\":[{\"device\":0,\"context\":1,\"stream\":13,\"kernels\":1,\"memcpys\":1,"
      "\"memsets\":0}],"
      "\"memcpy\":{\"DtoH\":{\"count\":1,\"bytes\":4096,\"gpu_time_ns\":2000}},"
      "\"memset\":{\"count\":0,\"bytes\":0,\"gpu_time_ns\":0},\"sync\":{\"count\":0,\"time_ns\":0},"
      "\"memory\":[{\"device\":0,\"allocs\":1,\"frees\":1,\"bytes_allocated\":8192,\"bytes_freed\":"
      "8192,"
      "\"in_use\":0,\"peak_in_use\":8192,\"by_kind\":{\"device\":8192}}],"
      "\"joins\":{\"runtime\":2,\"driver\":0,\"unknown\":0},"
      "\"losses\":{\"cupti_dropped_records\":3,\"zero_timestamps\":0,\"invalid_records\":0,"
      "\"unknown_correlation\":0,\"unknown_frees\":1,\"buffer_pool_exhausted\":2,"
      "\"lost_buffers\":0,\"exit_incomplete\":false}}");

  aggregate_free(a);
  corr_table_free(t);
  alloc_map_free(m);
}

static void test_file_and_errors(void)
{
  struct config cfg;
  struct summary_input in;
  struct stderr_capture cap;
  char dir[] = "/tmp/gpuprof-unit-XXXXXX";
  char path[4096], err[4096], *text;

  CHECK(mkdtemp(dir) != NULL);
  config_defaults(&cfg);
  /* The default name, in a directory that does not exist yet. */
  snprintf(cfg.output_dir, sizeof(cfg.output_dir), "%s/a/b", dir);
  memset(&in, 0, sizeof(in));
  in.cfg = &cfg;
  in.pid = 42;
  in.active = 0;
  in.inactive_reason = "cannot find libcupti.so.13";
  CHECK_EQ(summary_write_file(&in, path, sizeof(path)), 0);
  CHECK(strstr(path, "/a/b/gpuprof-") != NULL);
  {
    /* The process's own name (agent/util/files.h): here host-<our pid>, nothing claimed. */
    char want[64];
    snprintf(want, sizeof(want), "-%d-summary.json", (int)getpid());
    CHECK(strstr(path, want) != NULL);
  }
  text = read_file(path);
  CHECK(text != NULL);
  if (text) {
    CHECK(strstr(text, "\"state\": \"inactive\"") != NULL);
    CHECK(strstr(text, "\"inactive_reason\": \"cannot find libcupti.so.13\"") != NULL);
    CHECK(strstr(text, "\"by_name\": []") != NULL);
    CHECK(strstr(text, "\"memory\": []") != NULL);
  }

  /* GPUPROF_SUMMARY_FILE wins; no temporary file is left behind. */
  snprintf(cfg.summary_file, sizeof(cfg.summary_file), "%s/exact.json", dir);
  CHECK_EQ(summary_write_file(&in, path, sizeof(path)), 0);
  CHECK_STR(path, cfg.summary_file);
  snprintf(path, sizeof(path), "%s/exact.json.tmp.42", dir);
  CHECK(access(path, F_OK) != 0);

  /* Unwritable: one line naming the path, the reason and the variable to change. */
  snprintf(cfg.summary_file, sizeof(cfg.summary_file), "/proc/gpuprof-no/such.json");
  stderr_capture_begin(&cap);
  CHECK(summary_write_file(&in, NULL, 0) != 0);
  stderr_capture_end(&cap, err, sizeof(err));
  CHECK_EQ(count_lines(err), 1);
  CHECK(strstr(err, "/proc/gpuprof-no/such.json") != NULL);
  CHECK(strstr(err, "GPUPROF_SUMMARY_FILE") != NULL);
  fprintf(stderr, "     %s", err);
}

int main(void)
{
  RUN(test_active_layout);
  RUN(test_file_and_errors);
  UNIT_EXIT();
}
