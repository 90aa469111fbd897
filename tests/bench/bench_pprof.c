/* pprof windows: encode+compress time and size of a large window, and memory over many windows. */
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

static uint64_t rng = 88172645463325252ull;

static uint64_t next(void)
{
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* Part 1: the builder alone, 10 000 stacks x 10 kernels = 100 000 samples, 24 frames each.
 * Stacks are shaped like a call tree, as real ones are: few distinct outer frames, more and
 * more towards the leaf (level L has up to 2^(L/2+2) distinct frames), 10 000 distinct leaves. */
static void bench_encode(int stacks, int leaves, int depth, int rounds, int level)
{
  struct pprof_builder *b = pprof_builder_new();
  struct pprof_mapping m = {0x400000, 0x8000000, 0, "/usr/bin/python3", "0123456789abcdef", 1};
  uint64_t *frames = malloc((size_t)stacks * depth * sizeof(*frames));
  uint64_t locs[65];
  double best_build = 1e30, best_encode = 1e30;
  size_t len = 0;

  for (int s = 0; s < stacks; s++)
    for (int d = 0; d < depth; d++) {
      int outer = depth - 1 - d; /* 0: outermost */
      uint64_t distinct = outer / 2 + 2 < 14 ? 1ull << (outer / 2 + 2) : (uint64_t)stacks;
      frames[(size_t)s * depth + d] = (uint64_t)outer * 100000 + (uint64_t)s % distinct;
    }
  (void)next;
  for (int r = 0; r < rounds; r++) {
    uint64_t t0 = mono_ns(), t1, t2;
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
                 (unsigned long long)f);
        locs[d + 1] = pprof_builder_location(
            b, 1, 0x400000 + f * 64, pprof_builder_function(b, name, "torch/nn/module.py", 0), 0);
      }
      for (int l = 0; l < leaves; l++) {
        struct pprof_label gpu = {"gpu", l & 1 ? "1" : "0", 0, NULL};
        int64_t v[2] = {1 + l, 1000 * (1 + l) + s};
        snprintf(name, sizeof(name), "[gpu] void sm90_xmma_gemm_kernel_%d<float>(Params)", l);
        locs[0] = pprof_builder_location(b, 0, 0, pprof_builder_function(b, name, NULL, 0), 0);
        pprof_builder_add_sample(b, locs, (size_t)depth + 1, v, 2, &gpu, 1);
      }
    }
    t1 = mono_ns();
    if (pprof_builder_encode(b, level, &buf, &len)) {
      fprintf(stderr, "bench_pprof: encode failed\n");
      exit(1);
    }
    t2 = mono_ns();
    free(buf);
    if ((t1 - t0) / 1e6 < best_build)
      best_build = (t1 - t0) / 1e6;
    if ((t2 - t1) / 1e6 < best_encode)
      best_encode = (t2 - t1) / 1e6;
  }
  printf("encode: %d stacks x %d kernels = %zu samples, depth %d: build %.1f ms, "
         "encode+gzip(level %d) %.1f ms, %zu bytes compressed (best of %d)\n",
         stacks, leaves, pprof_builder_sample_count(b), depth, best_build, level, best_encode, len,
         rounds);
  pprof_builder_free(b);
  free(frames);
}

/* Part 2: the agent's window code over many windows of steady traffic (simulated clock):
 * 2 000 stacks, 18 000 kernels, 2 000 copies, 200 allocations and 200 frees per window. */
static void bench_windows(int windows, const char *dir)
{
  struct stack_table *st = stack_table_new(64 << 20);
  struct alloc_map *am = alloc_map_new(0);
  struct profiles_options o = {
      .output_dir = dir,
      .window_ns = 1000000000ull,
      .grace_ns = 200000000ull,
      .write_files = 1,
      .allocs = am,
      .stacks = st,
      .sample_every = 1,
      .host = "bench",
      .pid = (int)getpid(),
  };
  uint32_t ids[2000];
  uint64_t kept[100];
  uint64_t t = 1700000000000000000ull, key = 0x10000;
  struct profiles *p;
  struct profiles_stats stats;
  long first = 0;

  for (int i = 0; i < 2000; i++) {
    uint64_t f[16];
    for (int d = 0; d < 16; d++)
      f[d] = (uint64_t)(uintptr_t)&bench_encode + (uint64_t)((i * 7 + d * 13) % 997);
    ids[i] = stack_table_intern(st, f, 16);
  }
  p = profiles_new(&o, t);
  for (int w = 0; w < windows; w++) {
    uint64_t base = t + (uint64_t)w * o.window_ns;
    for (int i = 0; i < 20000; i++) {
      struct event ev = {.kind = i % 10 ? EVENT_KERNEL : EVENT_MEMCPY,
                         .start_ns = base + (uint64_t)i * 40000,
                         .end_ns = base + (uint64_t)i * 40000 + 3000};
      struct corr_info api = {.corr_id = 1, .stack_id = ids[i % 2000], .weight = 1};
      static const char *const names[4] = {"_Z4gemmv", "_Z4reluv", "_Z7softmaxv", "_Z4normv"};
      if (ev.kind == EVENT_KERNEL) {
        ev.u.kernel.name = names[i & 3];
      } else {
        ev.u.memcpy.bytes = 4096;
        ev.u.memcpy.copy_kind = EVENT_COPY_HTOD;
      }
      profiles_event(p, &ev, &api);
    }
    /* Steady state: the 100 kept in the previous window are freed, 100 new ones kept. */
    for (int i = 0; i < 200; i++) {
      struct alloc_info ai = {
          .size = 1 << 16, .kind = ALLOC_KIND_DEVICE, .api = "cuMemAlloc_v2", .stack_id = ids[i]};
      if (w > 0 && i < 100)
        alloc_map_remove(am, ALLOC_SPACE_VA, kept[i], NULL);
      alloc_map_insert(am, ALLOC_SPACE_VA, ++key, &ai);
      if (i & 1)
        alloc_map_remove(am, ALLOC_SPACE_VA, key, NULL);
      else
        kept[i / 2] = key;
    }
    profiles_tick(p, base + o.window_ns + o.grace_ns);
    if (w == 9)
      first = rss_kib();
    if ((w + 1) % (windows / 10 ? windows / 10 : 1) == 0)
      printf("windows: after %d windows RSS %ld KiB\n", w + 1, rss_kib());
  }
  profiles_finish(p, t + (uint64_t)windows * o.window_ns);
  profiles_get_stats(p, &stats);
  printf("windows: %llu windows, %llu files, %llu bytes; RSS after window 10: %ld KiB, at the "
         "end: %ld KiB\n",
         (unsigned long long)stats.windows, (unsigned long long)stats.files,
         (unsigned long long)stats.bytes, first, rss_kib());
  profiles_free(p);
  alloc_map_free(am);
  stack_table_free(st);
}

int main(int argc, char **argv)
{
  int windows = argc > 1 ? atoi(argv[1]) : 200;
  int rounds = argc > 2 ? atoi(argv[2]) : 5;
  int depth = argc > 3 ? atoi(argv[3]) : 24;
  char dir[] = "/tmp/bench_pprof.XXXXXX";

  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  if (depth < 1 || depth > 64)
    depth = 24;
  bench_encode(10000, 10, depth, rounds, 1);
  bench_encode(10000, 10, depth, rounds, 6);
  bench_windows(windows, dir);
  /* The profiles are not needed: only their count and size are reported. */
  {
    char cmd[64];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
      fprintf(stderr, "bench_pprof: could not remove %s\n", dir);
  }
  return 0;
}
