/* pprof windows: encode+compress time and size of a large window, and memory over a long run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent/alloc_map.h"
#include "agent/corr.h"
#include "agent/event.h"
#include "agent/profiles.h"
#include "agent/stack.h"
#include "export/pprof.h"

static uint64_t mono_ns(void)
{
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t cpu_ns(void)
{
  struct timespec ts;

  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static long rss_kib(void)
{
  long pages = 0, resident = 0;
  FILE *f = fopen("/proc/self/statm", "r");

  if (f) {
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
      resident = 0;
    fclose(f);
  }
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

/*
 * Part 1: the builder alone, 10 000 distinct stacks x 10 kernels = 100 000 samples. Stacks
 * are paths in a call tree, as real ones are: a trunk of 6 frames shared by all, then more
 * and more distinct nodes towards the leaf (a node splits in two at most levels, 10 000
 * leaves). Two shapes of that tree:
 *  - "unique": every node of the tree is its own function and location (about 3.4 distinct
 *    locations per stack at depth 24): the worst case, no code is reached by two paths;
 *  - "shared": a node is a call site drawn from at most 256 per level and 4 call sites share
 *    a function, as when the same model code (Module.__call__, forward, one torch op) is
 *    reached through many paths: the deduplicated locations are a few thousand.
 */
static void make_stacks(uint64_t *frames, int stacks, int depth, int shared)
{
  const int trunk = depth > 8 ? 6 : 0, bits = 14; /* 2^14 >= 10 000 leaves */

  for (int s = 0; s < stacks; s++)
    for (int d = 0; d < depth; d++) {
      int outer = depth - 1 - d; /* 0: outermost */
      int split = outer < trunk ? 0 : (outer - trunk + 1) * bits / (depth - trunk);
      uint64_t node = (uint64_t)s >> (bits - split); /* siblings differ by one */
      uint64_t site = node;

      if (shared && node >= 256)
        site = (node * 0x9e37u + (uint64_t)outer * 0x1234567u) & 255u;
      frames[(size_t)s * depth + d] = (uint64_t)outer * 100000 + site;
    }
}

static void bench_encode(int stacks, int leaves, int depth, int shared, int rounds, int level,
                         const char *dump)
{
  struct pprof_builder *b = pprof_builder_new();
  struct pprof_mapping m = {0x400000, 0x8000000, 0, "/usr/bin/python3", "0123456789abcdef", 1};
  uint64_t *frames = malloc((size_t)stacks * depth * sizeof(*frames));
  uint64_t locs[65];
  double best_build = 1e30, best_encode = 1e30, best_cpu = 1e30;
  size_t len = 0;

  make_stacks(frames, stacks, depth, shared);
  for (int r = 0; r < rounds; r++) {
    uint64_t t0 = mono_ns(), t1, t2, c1, c2;
    uint8_t *buf = NULL;
    char name[128];

    pprof_builder_reset(b);
    pprof_builder_add_sample_type(b, "launches", "count");
    pprof_builder_add_sample_type(b, "gpu_time", "nanoseconds");
    pprof_builder_set_period(b, "gpu_time", "nanoseconds", 1);
    pprof_builder_set_default_sample_type(b, "gpu_time");
    pprof_builder_set_time(b, 1700000000000000000ll, 15000000000ll);
    pprof_builder_add_mapping(b, &m);
    for (int s = 0; s < stacks; s++) {
      for (int d = 0; d < depth; d++) {
        uint64_t f = frames[(size_t)s * depth + d];
        snprintf(name, sizeof(name), "torch::autograd::function_%llu(at::Tensor const&)",
                 (unsigned long long)(shared ? f / 4 : f));
        locs[d + 1] = pprof_builder_location(
            b, 1, 0x400000 + f * 64, pprof_builder_function(b, name, name, "torch/nn/module.py", 0),
            0);
      }
      for (int l = 0; l < leaves; l++) {
        struct pprof_label gpu = {"gpu", l & 1 ? "1" : "0", 0, NULL};
        int64_t v[2] = {1 + l, 1000 * (1 + l) + s};
        snprintf(name, sizeof(name), "[gpu] void sm90_xmma_gemm_kernel_%d<float>(Params)", l);
        locs[0] =
            pprof_builder_location(b, 0, 0, pprof_builder_function(b, name, name, NULL, 0), 0);
        pprof_builder_add_sample(b, locs, (size_t)depth + 1, v, 2, &gpu, 1);
      }
    }
    t1 = mono_ns();
    c1 = cpu_ns();
    if (pprof_builder_encode(b, level, &buf, &len)) {
      fprintf(stderr, "bench_pprof: encode failed\n");
      exit(1);
    }
    t2 = mono_ns();
    c2 = cpu_ns();
    if (dump && r == rounds - 1) {
      FILE *f = fopen(dump, "wb");
      if (!f || fwrite(buf, 1, len, f) != len)
        fprintf(stderr, "bench_pprof: cannot write %s\n", dump);
      if (f)
        fclose(f);
    }
    free(buf);
    if ((t1 - t0) / 1e6 < best_build)
      best_build = (t1 - t0) / 1e6;
    if ((t2 - t1) / 1e6 < best_encode)
      best_encode = (t2 - t1) / 1e6;
    if ((c2 - c1) / 1e6 < best_cpu)
      best_cpu = (c2 - c1) / 1e6;
  }
  printf(
      "encode: %d stacks x %d kernels = %zu samples, depth %d, %s tree, %zu locations: build "
      "%.1f ms, encode+gzip(level %d) %.1f ms (CPU %.1f ms), %zu bytes compressed (best of %d)\n",
      stacks, leaves, pprof_builder_sample_count(b), depth, shared ? "shared" : "unique",
      pprof_builder_location_count(b), best_build, level, best_encode, best_cpu, len, rounds);
  pprof_builder_free(b);
  free(frames);
}

static long hwm_kib(void)
{
  char line[128];
  long kib = 0;
  FILE *f = fopen("/proc/self/status", "r");

  while (f && fgets(line, sizeof(line), f))
    if (sscanf(line, "VmHWM: %ld kB", &kib) == 1)
      break;
  if (f)
    fclose(f);
  return kib;
}

/*
 * Part 2: the agent's window code over a long run of steady traffic on a simulated clock:
 * windows of window_s seconds (15, the default window: 240 of them are an hour). Every
 * simulated second: 2 000 stacks, 18 000 kernels, 2 000 copies, 200 allocations of which 100
 * are freed at once and 100 kept until the next second (100 live). Every window is closed
 * (memory cut, 3 profiles built, encoded, written). RSS is printed along the way.
 */
static void bench_windows(int windows, int window_s, const char *dir)
{
  struct stack_table *st = stack_table_new(64 << 20);
  struct alloc_map *am = alloc_map_new(0);
  struct profiles_options o = {
      .output_dir = dir,
      .window_ns = (uint64_t)window_s * 1000000000ull,
      .grace_ns = 200000000ull,
      .write_files = 1,
      .allocs = am,
      .stacks = st,
      .sample_every = 1,
      .host = "bench",
      .pid = (int)getpid(),
  };
  static const char *const names[4] = {"_Z4gemmv", "_Z4reluv", "_Z7softmaxv", "_Z4normv"};
  uint32_t ids[2000];
  uint64_t kept[100];
  uint64_t t = 1700000000000000000ull, key = 0x10000;
  struct profiles *p;
  struct profiles_stats stats;
  uint64_t event_ns = 0, tick_ns = 0, c0, t0 = mono_ns();
  int step = windows / 6 > 0 ? windows / 6 : 1; /* RSS printed 6 times, and at 1, 10, 60, 120 */

  for (int i = 0; i < 2000; i++) {
    uint64_t f[16];
    for (int d = 0; d < 16; d++)
      f[d] = (uint64_t)(uintptr_t)&bench_encode + (uint64_t)((i * 7 + d * 13) % 997);
    ids[i] = stack_table_intern(st, f, 16);
  }
  p = profiles_new(&o, t);
  for (int w = 0; w < windows; w++) {
    uint64_t base = t + (uint64_t)w * o.window_ns;

    for (int sec = 0; sec < window_s; sec++) {
      uint64_t sbase = base + (uint64_t)sec * 1000000000ull;

      c0 = cpu_ns();
      for (int i = 0; i < 20000; i++) {
        struct event ev = {.kind = i % 10 ? EVENT_KERNEL : EVENT_MEMCPY,
                           .start_ns = sbase + (uint64_t)i * 40000,
                           .end_ns = sbase + (uint64_t)i * 40000 + 3000};
        struct corr_info api = {.corr_id = 1, .stack_id = ids[i % 2000], .weight = 1};
        if (ev.kind == EVENT_KERNEL) {
          ev.u.kernel.name = names[i & 3];
        } else {
          ev.u.memcpy.bytes = 4096;
          ev.u.memcpy.copy_kind = EVENT_COPY_HTOD;
        }
        profiles_event(p, &ev, &api);
      }
      event_ns += cpu_ns() - c0;
      /* Steady state: the 100 kept in the previous second are freed, 100 new ones kept. */
      for (int i = 0; i < 200; i++) {
        struct alloc_info ai = {
            .size = 1 << 16, .kind = ALLOC_KIND_DEVICE, .api = "cuMemAlloc_v2", .stack_id = ids[i]};
        if ((w > 0 || sec > 0) && i < 100)
          alloc_map_remove(am, ALLOC_SPACE_VA, kept[i], NULL);
        alloc_map_insert(am, ALLOC_SPACE_VA, ++key, &ai);
        if (i & 1)
          alloc_map_remove(am, ALLOC_SPACE_VA, key, NULL);
        else
          kept[i / 2] = key;
      }
    }
    c0 = cpu_ns();
    profiles_tick(p, base + o.window_ns + o.grace_ns);
    tick_ns += cpu_ns() - c0;
    if (w + 1 == 1 || w + 1 == 10 || w + 1 == 60 || w + 1 == 120 || (w + 1) % step == 0)
      printf("windows: after window %d (%d s simulated): RSS %ld KiB\n", w + 1, (w + 1) * window_s,
             rss_kib());
  }
  profiles_finish(p, t + (uint64_t)windows * o.window_ns);
  profiles_get_stats(p, &stats);
  printf("windows: %llu windows of %d s (%d s simulated, %.1f s to run), %llu files, %llu "
         "bytes; RSS at the end %ld KiB, peak %ld KiB\n",
         (unsigned long long)stats.windows, window_s, windows * window_s, (mono_ns() - t0) / 1e9,
         (unsigned long long)stats.files, (unsigned long long)stats.bytes, rss_kib(), hwm_kib());
  /* What the worker spends: per device event (the launch path's share), and per window. */
  printf("windows: CPU %.1f ns per profiles_event, %.2f ms per window closed (memory cut, "
         "3 profiles built, encoded and written)\n",
         (double)event_ns / ((double)windows * window_s * 20000), (double)tick_ns / 1e6 / windows);
  profiles_free(p);
  alloc_map_free(am);
  stack_table_free(st);
}

/*
 * Part 3: the agent's window code at the scale of part 1: the 10 000 stacks (at addresses
 * no module holds, so each frame is its own "0x..." function) x 10 kernels go through
 * profiles_event; closing the window builds (symbolizes, interns), encodes and writes the
 * gpu_time profile. The first window also symbolizes every frame; later ones reuse that.
 */
static void bench_agent_window(int depth, int shared, int rounds, const char *dir)
{
  struct stack_table *st = stack_table_new(256u << 20);
  struct profiles_options o = {
      .output_dir = dir,
      .window_ns = 1000000000ull,
      .grace_ns = 200000000ull,
      .write_files = 1,
      .stacks = st,
      .sample_every = 1,
      .max_keys = 1u << 17,
      .host = "bench",
      .pid = (int)getpid(),
  };
  static const char *const names[10] = {"_Z6gemm_0v", "_Z6gemm_1v", "_Z6gemm_2v", "_Z6gemm_3v",
                                        "_Z6gemm_4v", "_Z6gemm_5v", "_Z6gemm_6v", "_Z6gemm_7v",
                                        "_Z6gemm_8v", "_Z6gemm_9v"};
  uint64_t *frames = malloc((size_t)10000 * depth * sizeof(*frames));
  uint32_t *ids = malloc(10000 * sizeof(*ids));
  uint64_t t = 1700000000000000000ull, bytes = 0, first = 0, best = UINT64_MAX;
  struct profiles_stats stats;
  struct profiles *p;

  make_stacks(frames, 10000, depth, shared);
  for (int s = 0; s < 10000; s++) {
    uint64_t f[64];
    for (int d = 0; d < depth; d++)
      f[d] = 0x7e0000000000ull + frames[(size_t)s * depth + d] * 64;
    ids[s] = stack_table_intern(st, f, depth);
  }
  p = profiles_new(&o, t);
  for (int r = 0; r < rounds + 1; r++) {
    uint64_t base = t + (uint64_t)r * o.window_ns, c0;
    for (int i = 0; i < 100000; i++) {
      struct event ev = {.kind = EVENT_KERNEL,
                         .start_ns = base + (uint64_t)i * 1000,
                         .end_ns = base + (uint64_t)i * 1000 + 500 + i % 7};
      struct corr_info api = {.corr_id = 1, .stack_id = ids[i % 10000], .weight = 1};
      ev.u.kernel.name = names[i / 10000];
      profiles_event(p, &ev, &api);
    }
    profiles_get_stats(p, &stats);
    bytes = stats.bytes;
    c0 = cpu_ns();
    profiles_tick(p, base + o.window_ns + o.grace_ns);
    c0 = cpu_ns() - c0;
    profiles_get_stats(p, &stats);
    bytes = stats.bytes - bytes;
    if (r == 0)
      first = c0;
    else if (c0 < best)
      best = c0;
  }
  printf("agent window: 10000 stacks x 10 kernels, depth %d, %s tree: closing it %.1f ms CPU "
         "(the first, symbolizing every frame: %.1f ms; best of %d), %llu bytes compressed\n",
         depth, shared ? "shared" : "unique", best / 1e6, first / 1e6, rounds,
         (unsigned long long)bytes);
  profiles_free(p);
  stack_table_free(st);
  free(frames);
  free(ids);
}

int main(int argc, char **argv)
{
  int windows = argc > 1 ? atoi(argv[1]) : 240;
  int rounds = argc > 2 ? atoi(argv[2]) : 5;
  int depth = argc > 3 ? atoi(argv[3]) : 24;
  int window_s = argc > 4 ? atoi(argv[4]) : 15;
  /* BENCH_PPROF_ONLY=encode|agent|windows runs one part; BENCH_PPROF_KEEP=DIR writes the
   * agent's profiles there and keeps them (for go tool pprof); BENCH_PPROF_LEVEL0=1 also
   * encodes at zlib level 0 (stored: what packing costs, with the CRC). */
  const char *only = getenv("BENCH_PPROF_ONLY"), *keep = getenv("BENCH_PPROF_KEEP");
  char tmp[] = "/tmp/bench_pprof.XXXXXX";
  const char *dir = keep ? keep : tmp;

  if (!keep && !mkdtemp(tmp)) {
    perror("mkdtemp");
    return 1;
  }
  if (depth < 1 || depth > 64)
    depth = 24;
  for (int shared = 1; shared >= 0 && (!only || !strcmp(only, "encode")); shared--) {
    if (getenv("BENCH_PPROF_LEVEL0"))
      bench_encode(10000, 10, depth, shared, rounds, 0, NULL);
    bench_encode(10000, 10, depth, shared, rounds, 1, shared ? getenv("BENCH_PPROF_DUMP") : NULL);
    bench_encode(10000, 10, depth, shared, rounds, 6, NULL);
  }
  if (!only || !strcmp(only, "agent")) {
    bench_agent_window(depth, 1, rounds, dir);
    bench_agent_window(depth, 0, rounds, dir);
  }
  if (!only || !strcmp(only, "windows"))
    bench_windows(windows, window_s > 0 ? window_s : 15, dir);
  /* The profiles are not needed: only their count and size are reported. */
  if (!keep) {
    char cmd[64];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
    if (system(cmd) != 0)
      fprintf(stderr, "bench_pprof: could not remove %s\n", tmp);
  }
  return 0;
}
