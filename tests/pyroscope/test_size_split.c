/* Upload halving by size (agent/profiles.c upload_halves): how many parts a window goes up in. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/event.h"
#include "agent/profiles.h"
#include "proto/profile.pb-c.h"

#include "tests/pprof/pprof_check.h"

#define S 1000000000ull
#define T (1700000000ull * S) /* a multiple of the window */
#define KERNELS 64
#define NAME_LEN 1000

static char dir[256];
static char names[KERNELS][NAME_LEN + 1];

/*
 * The uploader is not started here, so every submit fails and counts one upload error: the
 * errors count the parts a window went up in. 64 kernels of 1000-byte names make a gpu_time
 * profile of about 67 KB uncompressed, 32 of them about 34 KB, 16 about 17 KB.
 */
static struct profiles_stats run(uint64_t max_size, size_t max_samples, size_t *file_samples)
{
  struct profiles_options o = {
      .output_dir = dir,
      .window_ns = 10 * S,
      .grace_ns = S,
      .write_files = 1,
      .upload = 1,
      .upload_max_size = max_size,
      .upload_max_samples = max_samples,
      .host = "testhost",
      .pid = 42,
  };
  struct profiles *p = profiles_new(&o, T + S);
  struct profiles_stats st;
  struct event ev;
  struct dirent *e;
  DIR *d;

  memset(&st, 0, sizeof(st));
  *file_samples = 0;
  CHECK(p != NULL);
  if (!p)
    return st;
  for (int i = 0; i < KERNELS; i++) {
    memset(&ev, 0, sizeof(ev));
    ev.kind = EVENT_KERNEL;
    ev.start_ns = T + 2 * S + (uint64_t)i;
    ev.end_ns = ev.start_ns + 100;
    ev.u.kernel.name = names[i];
    profiles_event(p, &ev, NULL);
  }
  profiles_finish(p, T + 3 * S);
  profiles_get_stats(p, &st);
  profiles_free(p);

  /* The file on disk stays one profile of every sample; removed for the next run. */
  d = opendir(dir);
  while (d && (e = readdir(d))) {
    char path[512];
    uint8_t *gz = malloc(1 << 20), *raw = NULL;
    size_t len = 0, raw_len = 0;
    FILE *f;

    if (e->d_name[0] == '.' || !gz) {
      free(gz);
      continue;
    }
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    if ((f = fopen(path, "rb"))) {
      len = fread(gz, 1, 1 << 20, f);
      fclose(f);
      raw = gunzip_profile(gz, len, 1 << 20, &raw_len);
    }
    if (raw && raw_len) {
      Perftools__Profiles__Profile *prof = perftools__profiles__profile__unpack(NULL, raw_len, raw);
      if (prof)
        *file_samples += prof->n_sample;
      perftools__profiles__profile__free_unpacked(prof, NULL);
    }
    free(raw);
    free(gz);
    unlink(path);
  }
  if (d)
    closedir(d);
  return st;
}

/* Runs with stderr in a file; returns the lines that name GPUPROF_PYROSCOPE_MAX_SIZE. */
static int run_quiet(uint64_t max_size, struct profiles_stats *st, size_t *file_samples)
{
  FILE *tmp = tmpfile();
  int saved = dup(2), lines = 0;
  char line[1024];

  fflush(stderr);
  if (tmp)
    dup2(fileno(tmp), 2);
  *st = run(max_size, 0, file_samples);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  if (!tmp)
    return -1;
  rewind(tmp);
  while (fgets(line, sizeof(line), tmp)) {
    fputs(line, stderr);
    lines += strstr(line, "GPUPROF_PYROSCOPE_MAX_SIZE=500") != NULL;
  }
  fclose(tmp);
  return lines;
}

int main(void)
{
  struct profiles_stats st;
  size_t samples;

  snprintf(dir, sizeof(dir), "/tmp/gpuprof-size-split-%d", (int)getpid());
  for (int i = 0; i < KERNELS; i++) {
    memset(names[i], 'a' + i % 26, NAME_LEN);
    snprintf(names[i], 16, "kernel_%02d_", i);
    names[i][strlen(names[i])] = 'x';
  }

  /* No limit, and a limit the window is within: one upload. */
  st = run(0, 0, &samples);
  CHECK(st.upload_errors == 1 && st.split_uploads == 0 && st.files == 1 && samples == KERNELS);
  st = run(1ull << 30, 0, &samples);
  CHECK(st.upload_errors == 1 && st.split_uploads == 0 && st.files == 1 && samples == KERNELS);
  /* 20 000 bytes: 64 -> 32 (over) -> 16 (within): four parts, one window split. */
  st = run(20000, 0, &samples);
  CHECK(st.upload_errors == 4 && st.split_uploads == 1 && st.files == 1 && samples == KERNELS);
  /* The sample split first (two parts of 32), then each part over 20 000 bytes in halves. */
  st = run(20000, 32, &samples);
  CHECK(st.upload_errors == 4 && st.split_uploads == 1 && st.files == 1 && samples == KERNELS);
  st = run(1ull << 30, 32, &samples);
  CHECK(st.upload_errors == 2 && st.split_uploads == 1 && st.files == 1 && samples == KERNELS);
  /* Under one sample's size: halved down to single samples, each an error, one warning. */
  CHECK(run_quiet(500, &st, &samples) == 1);
  CHECK(st.upload_errors == KERNELS && st.split_uploads == 1 && st.files == 1 &&
        samples == KERNELS);
  rmdir(dir);
  fprintf(stderr, "%s\n", failures ? "FAIL" : "ok");
  return failures ? 1 : 0;
}
