/* pprof windows driven by a simulated wall clock: steps of the clock and stray timestamps. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/event.h"
#include "agent/profiles.h"
#include "agent/util/files.h"
#include "proto/profile.pb-c.h"

#include "tests/pprof/pprof_check.h"

#define S 1000000000ull
#define WINDOW (10 * S)
#define GRACE (1 * S)
/* 2023-11-14T22:13:20Z: a multiple of the window. */
#define T (1700000000ull * S)

static char dir[256];

static struct profiles *new_profiles(uint64_t now)
{
  struct profiles_options o = {
      .output_dir = dir,
      .window_ns = WINDOW,
      .grace_ns = GRACE,
      .write_files = 1,
      .host = "testhost",
      .pid = 42,
  };
  return profiles_new(&o, now);
}

static void kernel(struct profiles *p, uint64_t start, uint64_t dur)
{
  struct event ev;

  memset(&ev, 0, sizeof(ev));
  ev.kind = EVENT_KERNEL;
  ev.start_ns = start;
  ev.end_ns = start + dur;
  ev.u.kernel.name = "k";
  profiles_event(p, &ev, NULL);
}

/* The launches and GPU time of the gpu_time file of the window starting at start; -1 when
 * there is no such file. */
static int read_gpu_time(uint64_t start, long long *launches, long long *ns)
{
  char stamp[32], path[512];
  uint8_t gz[1 << 16], *raw;
  size_t len, raw_len;
  FILE *f;
  Perftools__Profiles__Profile *prof;

  files_utc_stamp(start, stamp, sizeof(stamp));
  snprintf(path, sizeof(path), "%s/gpuprof-testhost-42-gpu_time-%s.pb.gz", dir, stamp);
  f = fopen(path, "rb");
  if (!f)
    return -1;
  len = fread(gz, 1, sizeof(gz), f);
  fclose(f);
  raw = gunzip_profile(gz, len, 1 << 20, &raw_len);
  prof = raw ? perftools__profiles__profile__unpack(NULL, raw_len, raw) : NULL;
  free(raw);
  if (!prof)
    return -1;
  *launches = *ns = 0;
  for (size_t i = 0; i < prof->n_sample; i++) {
    *launches += prof->sample[i]->value[0];
    *ns += prof->sample[i]->value[1];
  }
  CHECK(prof->time_nanos == (int64_t)start);
  perftools__profiles__profile__free_unpacked(prof, NULL);
  return 0;
}

static int count_files(void)
{
  DIR *d = opendir(dir);
  struct dirent *e;
  int n = 0;

  while (d && (e = readdir(d)))
    n += e->d_name[0] != '.';
  if (d)
    closedir(d);
  return n;
}

static void clean(void)
{
  DIR *d = opendir(dir);
  struct dirent *e;
  char path[512];

  while (d && (e = readdir(d))) {
    if (e->d_name[0] == '.')
      continue;
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    unlink(path);
  }
  if (d)
    closedir(d);
}

/* Ordinary windows: an event exactly at a boundary belongs to the window it starts. */
static void test_boundaries(void)
{
  struct profiles *p = new_profiles(T + 1 * S);
  long long l, ns;

  kernel(p, T + 2 * S, 100);
  kernel(p, T + WINDOW, 200); /* the first instant of the next window */
  profiles_tick(p, T + WINDOW + GRACE / 2);
  CHECK(count_files() == 0); /* still within the grace period */
  profiles_tick(p, T + WINDOW + GRACE);
  CHECK(read_gpu_time(T, &l, &ns) == 0 && l == 1 && ns == 100);
  profiles_tick(p, T + 2 * WINDOW + GRACE);
  CHECK(read_gpu_time(T + WINDOW, &l, &ns) == 0 && l == 1 && ns == 200);
  /* A window without events writes no file. */
  profiles_tick(p, T + 3 * WINDOW + GRACE);
  profiles_finish(p, T + 3 * WINDOW + 2 * GRACE);
  CHECK(count_files() == 2);
  profiles_free(p);
  clean();
}

/*
 * The wall clock steps back an hour (NTP, a VM resumed): the windows after the step are
 * written as they end, not an hour later when the clock is back where it was.
 */
static void test_clock_back(void)
{
  const uint64_t b = T - 3600 * S;
  struct profiles *p = new_profiles(T + 1 * S);
  long long l, ns;

  kernel(p, T + 2 * S, 100);
  profiles_tick(p, T + 5 * S);
  /* The step. */
  profiles_tick(p, b + 1 * S);
  kernel(p, b + 2 * S, 300);
  kernel(p, T + 3 * S, 50); /* a record from before the step, delivered after it */
  profiles_tick(p, b + WINDOW + GRACE);
  CHECK(read_gpu_time(T, &l, &ns) == 0 && l == 1 && ns == 100);
  CHECK(read_gpu_time(b, &l, &ns) == 0 && l == 2 && ns == 350);
  CHECK(count_files() == 2);
  profiles_finish(p, b + WINDOW + 2 * GRACE);
  CHECK(count_files() == 2);
  profiles_free(p);
  clean();
}

/* A record with a time stamp far in the future (a bad clock on the device side) neither holds
 * back the windows nor opens a window of its own: it is counted in the newest one. */
static void test_future_record(void)
{
  struct profiles *p = new_profiles(T + 1 * S);
  long long l, ns;

  kernel(p, T + 2 * S, 100);
  kernel(p, T + 10 * 86400 * S, 7);
  kernel(p, T + WINDOW + 2 * S, 200);
  profiles_tick(p, T + WINDOW + 5 * S);
  profiles_tick(p, T + 2 * WINDOW + 5 * S);
  CHECK(read_gpu_time(T, &l, &ns) == 0 && l == 2 && ns == 107);
  CHECK(read_gpu_time(T + WINDOW, &l, &ns) == 0 && l == 1 && ns == 200);
  CHECK(count_files() == 2);
  profiles_finish(p, T + 2 * WINDOW + 6 * S);
  CHECK(count_files() == 2);
  profiles_free(p);
  clean();
}

/* The clock steps forward a day: the open windows are written at once, the new one opens. */
static void test_clock_forward(void)
{
  const uint64_t f = T + 86400 * S;
  struct profiles *p = new_profiles(T + 1 * S);
  long long l, ns;

  kernel(p, T + 2 * S, 100);
  profiles_tick(p, f + 1 * S);
  CHECK(read_gpu_time(T, &l, &ns) == 0 && l == 1 && ns == 100);
  kernel(p, f + 2 * S, 300);
  profiles_finish(p, f + 3 * S);
  CHECK(read_gpu_time(f, &l, &ns) == 0 && l == 1 && ns == 300);
  CHECK(count_files() == 2);
  profiles_free(p);
  clean();
}

/*
 * The temporary file's name is predictable (host, pid, kind, window): a link planted there by
 * another user of a shared output directory (/tmp/gpuprof by default) is not followed, so the
 * file it points to is neither truncated nor overwritten; the profile is written anyway.
 */
static void test_planted_link(void)
{
  char stamp[32], tmp[512], victim[512], buf[16] = "";
  struct profiles *p = new_profiles(T + 1 * S);
  long long l, ns;
  FILE *f;

  snprintf(victim, sizeof(victim), "%s.victim", dir);
  f = fopen(victim, "w");
  fputs("precious", f);
  fclose(f);
  files_utc_stamp(T, stamp, sizeof(stamp));
  snprintf(tmp, sizeof(tmp), "%s/gpuprof-testhost-42-gpu_time-%s.pb.gz.tmp", dir, stamp);
  CHECK(symlink(victim, tmp) == 0);
  kernel(p, T + 2 * S, 100);
  profiles_finish(p, T + 3 * S);
  f = fopen(victim, "r");
  CHECK(f && fgets(buf, sizeof(buf), f) && !strcmp(buf, "precious"));
  if (f)
    fclose(f);
  CHECK(read_gpu_time(T, &l, &ns) == 0 && l == 1 && ns == 100);
  CHECK(access(tmp, F_OK) != 0);
  unlink(victim);
  profiles_free(p);
  clean();
}

int main(void)
{
  snprintf(dir, sizeof(dir), "/tmp/gpuprof-pprof-windows-%d", (int)getpid());
  if (files_mkdir_p(dir, 0755)) {
    fprintf(stderr, "cannot create %s\n", dir);
    return 1;
  }
  test_boundaries();
  test_clock_back();
  test_future_record();
  test_clock_forward();
  test_planted_link();
  clean();
  rmdir(dir);
  if (failures)
    fprintf(stderr, "%d check(s) failed\n", failures);
  else
    printf("ok\n");
  return failures ? 1 : 0;
}
