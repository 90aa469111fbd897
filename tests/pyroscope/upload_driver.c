/* Drives the uploader directly: submits numbered synthetic profiles, stops it, prints its stats. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent/config.h"
#include "agent/uploader.h"
#include "agent/util/clock.h"
#include "export/pprof.h"

/*
 * Usage: [UPLOAD_DRIVER_LATE=1] upload_driver COUNT INTERVAL_MS [WAIT_SENT WAIT_MS]
 * Configuration comes from the environment, as in the agent (GPUPROF_PYROSCOPE_URL, ...).
 * Profile i has kind gpu_time, gpu_memory, memcpy in turn and one sample whose leaf function
 * is "window_<i>", so the receiver can tell exactly which profiles arrived. After submitting,
 * it optionally waits up to WAIT_MS for WAIT_SENT profiles to be sent (a server that comes
 * back mid-run), then returns from main; an exit handler registered before uploader_start,
 * as the agent's is, calls uploader_stop(GPUPROF_EXIT_TIMEOUT) and prints one JSON line: the
 * stats, uploader_stop's result and how long it took. (Stopping from an exit handler that
 * runs after the ones libcurl's TLS library registers is what the agent does.)
 */

static const char *const kinds[] = {"gpu_time", "gpu_memory", "memcpy"};

static struct config cfg;
static int rejected;

static void stop_at_exit(void)
{
  struct uploader_stats s;
  uint64_t t0 = clock_monotonic_ns(), stop_ns;
  int enabled, ret;

  ret = uploader_stop(cfg.exit_timeout_ns);
  stop_ns = clock_monotonic_ns() - t0;
  uploader_get_stats(&s, &enabled);
  printf("{\"enabled\": %d, \"submitted\": %llu, \"sent\": %llu, \"retried\": %llu, "
         "\"dropped\": %llu, \"failed\": %llu, \"bytes_sent\": %llu, \"submit_errors\": %d, "
         "\"stop_ret\": %d, \"stop_ms\": %llu}\n",
         enabled, (unsigned long long)s.submitted, (unsigned long long)s.sent,
         (unsigned long long)s.retried, (unsigned long long)s.dropped, (unsigned long long)s.failed,
         (unsigned long long)s.bytes_sent, rejected, ret,
         (unsigned long long)(stop_ns / 1000000ull));
  fflush(stdout);
}

static unsigned late_index;
static int build(unsigned i, uint64_t start_ns, uint64_t dur_ns, uint8_t **out, size_t *len);

/* UPLOAD_DRIVER_LATE=1: one more profile submitted from an exit handler that runs after
 * OpenSSL's own (registered later, by curl_global_init) and before the stop: as the agent's
 * last window, which is submitted at exit. */
static void submit_late(void)
{
  uint64_t now = clock_realtime_ns();
  uint8_t *buf;
  size_t len;

  if (build(late_index, now - 1000000000ull, 1000000000ull, &buf, &len) == 0) {
    if (uploader_submit(kinds[late_index % 3], buf, len, now - 1000000000ull, now))
      rejected++;
    free(buf);
  }
}

static int build(unsigned i, uint64_t start_ns, uint64_t dur_ns, uint8_t **out, size_t *len)
{
  struct pprof_builder *b = pprof_builder_new();
  char leaf[32];
  uint64_t locs[2];
  int64_t values[2] = {1000 + i, 1};
  struct pprof_label label = {"gpu", "0", 0, NULL};
  int ret;

  if (!b)
    return -ENOMEM;
  switch (i % 3) {
  case 0:
    pprof_builder_add_sample_type(b, "launches", "count");
    pprof_builder_add_sample_type(b, "gpu_time", "nanoseconds");
    pprof_builder_set_period(b, "gpu_time", "nanoseconds", 1);
    break;
  case 1:
    pprof_builder_add_sample_type(b, "inuse_objects", "count");
    pprof_builder_add_sample_type(b, "inuse_space", "bytes");
    pprof_builder_set_period(b, "space", "bytes", 1);
    break;
  default:
    pprof_builder_add_sample_type(b, "count", "count");
    pprof_builder_add_sample_type(b, "bytes", "bytes");
    pprof_builder_set_period(b, "bytes", "bytes", 1);
    break;
  }
  pprof_builder_set_time(b, (int64_t)start_ns, (int64_t)dur_ns);
  snprintf(leaf, sizeof(leaf), "window_%u", i);
  locs[0] = pprof_builder_location(b, 0, 0, pprof_builder_function(b, leaf, leaf, "", 0), 0);
  locs[1] =
      pprof_builder_location(b, 0, 0, pprof_builder_function(b, "main", "main", "driver.c", 1), 0);
  ret = pprof_builder_add_sample(b, locs, 2, values, 2, &label, 1);
  if (!ret)
    ret = pprof_builder_encode(b, -1, out, len);
  pprof_builder_free(b);
  return ret;
}

int main(int argc, char **argv)
{
  struct uploader_stats s;
  unsigned count, interval_ms, wait_sent = 0, wait_ms = 0;
  uint64_t t0;
  int enabled, ret;

  if (argc != 3 && argc != 5) {
    fprintf(stderr, "usage: %s COUNT INTERVAL_MS [WAIT_SENT WAIT_MS]\n", argv[0]);
    return 2;
  }
  count = (unsigned)atoi(argv[1]);
  interval_ms = (unsigned)atoi(argv[2]);
  if (argc == 5) {
    wait_sent = (unsigned)atoi(argv[3]);
    wait_ms = (unsigned)atoi(argv[4]);
  }
  config_load(&cfg);
  atexit(stop_at_exit);
  late_index = count;
  if (getenv("UPLOAD_DRIVER_LATE"))
    atexit(submit_late);
  ret = uploader_start(&cfg);
  if (ret)
    fprintf(stderr, "upload_driver: uploader_start: %d\n", ret);

  for (unsigned i = 0; i < count; i++) {
    uint64_t now = clock_realtime_ns();
    uint8_t *buf;
    size_t len;

    if (build(i, now - 1000000000ull, 1000000000ull, &buf, &len)) {
      fprintf(stderr, "upload_driver: cannot build profile %u\n", i);
      return 1;
    }
    ret = uploader_submit(kinds[i % 3], buf, len, now - 1000000000ull, now);
    free(buf);
    if (ret)
      rejected++;
    if (interval_ms)
      usleep(interval_ms * 1000u);
  }

  /* Lets the upload thread initialize libcurl (and so OpenSSL, registering its exit handler)
   * before this process exits: the late profile then is the first libcurl use after it. */
  if (getenv("UPLOAD_DRIVER_LATE"))
    usleep(300000);
  t0 = clock_monotonic_ns();
  while (wait_sent && clock_monotonic_ns() - t0 < (uint64_t)wait_ms * 1000000ull) {
    uploader_get_stats(&s, &enabled);
    if (s.sent >= wait_sent)
      break;
    usleep(20000);
  }

  return 0;
}
