/* Unit tests of agent/oom.c's exit path: every failure is counted once, joined worker or not. */
#include <dirent.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "agent/alloc_map.h"
#include "agent/config.h"
#include "agent/oom.h"
#include "agent/stack.h"
#include "unit.h"

static char dir[] = "/tmp/gpuprof-oom-stop-XXXXXX";

static const char api[] = "cudaMalloc_v3020";

static struct oom_event failure(void)
{
  return (struct oom_event){.time_ns = 1732200000000000000ull,
                            .bytes = 16 << 20,
                            .api = api,
                            .tid = 4242,
                            .device = 0,
                            .kind = ALLOC_KIND_DEVICE};
}

/* oom.c's state is process-wide and started once: each case runs in a child of its own. */
static void start(void)
{
  static struct config cfg;
  struct alloc_map *m = alloc_map_new(64);
  struct alloc_info held = {.size = 8 << 20, .device = 0, .api = api};

  config_defaults(&cfg);
  cfg.mode = CONFIG_MODE_CONTINUOUS;
  cfg.oom_interval_ns = 60ull * 1000000000ull;
  snprintf(cfg.output_dir, sizeof(cfg.output_dir), "%s", dir);
  CHECK(m != NULL);
  CHECK_EQ(alloc_map_insert(m, ALLOC_SPACE_VA, 0x7000000000ull, &held), 0);
  CHECK_EQ(oom_start(&cfg, m, stack_table_new(1 << 20)), 0);
}

static void check_sum(const struct oom_stats *st)
{
  CHECK_EQ(st->failed, st->snapshots + st->skipped + st->errors);
}

static int count_files(void)
{
  DIR *d = opendir(dir);
  struct dirent *e;
  int n = 0;

  while (d && (e = readdir(d)))
    n += strstr(e->d_name, "gpu_memory_oom") != NULL;
  if (d)
    closedir(d);
  return n;
}

/* The worker could not be joined: the snapshot it never wrote is an error, not lost. */
static void case_not_joined(void)
{
  struct oom_event ev = failure();
  struct oom_stats st;

  start();
  oom_record(&ev);
  oom_stop(0);
  oom_get_stats(&st);
  CHECK_EQ(st.failed, 1);
  CHECK_EQ(st.snapshots, 0);
  CHECK_EQ(st.skipped, 0);
  CHECK_EQ(st.errors, 1);
  check_sum(&st);
  /* A thread whose failure comes after the stop (it passed the state check before): skipped. */
  oom_record(&ev);
  oom_get_stats(&st);
  CHECK_EQ(st.failed, 2);
  CHECK_EQ(st.skipped, 1);
  CHECK_EQ(st.errors, 1);
  check_sum(&st);
  CHECK_EQ(count_files(), 0);
}

/* Joined: the exit path writes the pending snapshot itself; a later failure is skipped. */
static void case_joined(void)
{
  struct oom_event ev = failure();
  struct oom_stats st;

  start();
  oom_record(&ev);
  oom_stop(1);
  oom_get_stats(&st);
  CHECK_EQ(st.failed, 1);
  CHECK_EQ(st.snapshots, 1);
  CHECK_EQ(st.skipped, 0);
  CHECK_EQ(st.errors, 0);
  CHECK_EQ(count_files(), 1);
  oom_record(&ev);
  oom_get_stats(&st);
  CHECK_EQ(st.failed, 2);
  CHECK_EQ(st.skipped, 1);
  check_sum(&st);
  CHECK_EQ(count_files(), 1);
}

static void in_child(void (*fn)(void))
{
  pid_t pid = fork();
  int status = 0;

  if (pid == 0) {
    unit_failures = 0; /* the child's own */
    fn();
    _exit(unit_failures ? 1 : 0);
  }
  CHECK(pid > 0);
  CHECK_EQ(waitpid(pid, &status, 0), pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void test_not_joined(void)
{
  in_child(case_not_joined);
}

static void test_joined(void)
{
  in_child(case_joined);
}

int main(void)
{
  char cmd[64];

  if (!mkdtemp(dir))
    return 1;
  RUN(test_not_joined);
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  CHECK_EQ(system(cmd), 0);
  CHECK(mkdtemp(strcpy(dir, "/tmp/gpuprof-oom-stop-XXXXXX")) != NULL);
  RUN(test_joined);
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  CHECK_EQ(system(cmd), 0);
  UNIT_EXIT();
}
