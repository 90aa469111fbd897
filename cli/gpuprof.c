/* The gpuprof command: runs a program with the agent injected, lists agents, takes, merges and
 * analyzes captures. */
#define _GNU_SOURCE
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/analyze.h"
#include "cli/client.h"
#include "cli/merge.h"
#include "include/gpuprof/gpuprof.h"

static void usage(FILE *out)
{
  fprintf(out, "%s",
          "usage: gpuprof run [--output DIR] [--log LEVEL] [--mode MODE] [--agent PATH]\n"
          "                   -- PROGRAM [ARGS...]\n"
          "       gpuprof list [--run-dir DIR]\n"
          "       gpuprof capture [--pid N | --all] [--duration 60s] [--gpu-only]\n"
          "                       [--format json|json.gz|perfetto] [--output DIR] [--run-dir DIR]\n"
          "                       [--merge]\n"
          "       gpuprof stop [--pid N | --all] [--run-dir DIR]\n"
          "       gpuprof merge [-o OUT] FILE...\n"
          "       gpuprof analyze [--json FILE|-] TRACE...\n"
          "       gpuprof version\n"
          "\n"
          "run      runs PROGRAM with the gpuprof agent injected (CUDA_INJECTION64_PATH, and\n"
          "         NCCL_PROFILER_PLUGIN and NVTX_INJECTION64_PATH unless set)\n"
          "         --output DIR   where profiles, traces and the summary go (GPUPROF_OUTPUT_DIR)\n"
          "         --log LEVEL    error, warn, info (prints the exit summary) or debug\n"
          "         --mode MODE    continuous, ondemand or off (GPUPROF_MODE)\n"
          "         --agent PATH   the agent library (default: ../lib/libgpuprof.so beside\n"
          "                        this command, or $GPUPROF_AGENT)\n"
          "list     the agent processes reachable in the run directory (--run-dir, else\n"
          "         $GPUPROF_RUN_DIR, else " CONTROL_DEFAULT_RUN_DIR "): pid, mode, capture, GPUs\n"
          "capture  starts a trace capture in one process (--pid, or the only one), or in all\n"
          "         of them over the same window (--all); shows progress, then prints the files\n"
          "         written (by the agent, in its filesystem: --output DIR, else its\n"
          "         GPUPROF_OUTPUT_DIR). Ctrl-C ends it early.\n"
          "         --merge: also merges the traces into one file and prints it\n"
          "stop     ends the running capture early\n"
          "merge    merges capture traces of several processes (JSON, or .pftrace) into one\n"
          "         trace on one clock (-o OUT, else next to the first); prints the file\n"
          "analyze  reads capture traces (one per process, e.g. every rank of a job) and reports\n"
          "         GPU busy time, the longest idle gaps and the host calls in them, the top\n"
          "         kernels, copies and CUDA calls, and which rank an NCCL hang waits for\n"
          "         (--json FILE, or - for stdout: the report as JSON; docs/ANALYZE.md)\n"
          "\n"
          "exit status: 0 ok, 1 error, 2 usage, 3 busy (a capture was running), 4 no agent\n"
          "(docs/CONTROL.md)\n");
}

/* The agent is installed as <prefix>/lib/libgpuprof.so next to <prefix>/bin/gpuprof. */
static int find_agent(char *out, size_t len)
{
  const char *env = getenv("GPUPROF_AGENT");
  if (env && *env) {
    snprintf(out, len, "%s", env);
    return access(out, R_OK) == 0 ? 0 : -errno;
  }
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n < 0)
    return -errno;
  exe[n] = '\0';
  const char *dir = dirname(exe);
  snprintf(out, len, "%s/../lib/libgpuprof.so", dir);
  if (access(out, R_OK) == 0)
    return 0;
  snprintf(out, len, "%s/libgpuprof.so", dir);
  return access(out, R_OK) == 0 ? 0 : -ENOENT;
}

static int cmd_run(int argc, char **argv)
{
  char agent[PATH_MAX] = "";
  int i;
  for (i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--") == 0) {
      i++;
      break;
    }
    if (a[0] != '-')
      break;
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      usage(stdout);
      return 0;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "gpuprof run: %s needs a value\n", a);
      return 2;
    }
    const char *v = argv[++i];
    if (strcmp(a, "--output") == 0)
      setenv("GPUPROF_OUTPUT_DIR", v, 1);
    else if (strcmp(a, "--log") == 0)
      setenv("GPUPROF_LOG", v, 1);
    else if (strcmp(a, "--mode") == 0)
      setenv("GPUPROF_MODE", v, 1);
    else if (strcmp(a, "--agent") == 0)
      snprintf(agent, sizeof(agent), "%s", v);
    else {
      fprintf(stderr, "gpuprof run: unknown option %s\n", a);
      usage(stderr);
      return 2;
    }
  }
  if (i >= argc) {
    fprintf(stderr, "gpuprof run: no program given\n");
    usage(stderr);
    return 2;
  }
  if (!agent[0] && find_agent(agent, sizeof(agent)) < 0) {
    fprintf(stderr, "gpuprof run: cannot find libgpuprof.so beside this command; "
                    "pass --agent PATH or set GPUPROF_AGENT\n");
    return 2;
  }
  char abs[PATH_MAX];
  if (!realpath(agent, abs)) {
    fprintf(stderr, "gpuprof run: agent %s: %s\n", agent, strerror(errno));
    return 2;
  }
  /* The driver dlopens this path inside the program's first cuInit. */
  setenv("CUDA_INJECTION64_PATH", abs, 1);
  /* NCCL loads the same file as its profiler plugin (collective names, sizes, communicators);
   * a plugin the user chose, or "none", is kept. */
  setenv("NCCL_PROFILER_PLUGIN", abs, 0);
  /* NVTX loaders (one per module) load it for NVTX ranges in captures; another NVTX tool the
   * user chose is kept. */
  setenv("NVTX_INJECTION64_PATH", abs, 0);
  execvp(argv[i], argv + i);
  fprintf(stderr, "gpuprof run: cannot run %s: %s\n", argv[i], strerror(errno));
  return 127;
}

int main(int argc, char **argv)
{
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (strcmp(argv[1], "run") == 0)
    return cmd_run(argc - 2, argv + 2);
  if (strcmp(argv[1], "list") == 0)
    return cmd_list(argc - 2, argv + 2);
  if (strcmp(argv[1], "capture") == 0)
    return cmd_capture(argc - 2, argv + 2);
  if (strcmp(argv[1], "stop") == 0)
    return cmd_stop(argc - 2, argv + 2);
  if (strcmp(argv[1], "merge") == 0)
    return cmd_merge(argc - 2, argv + 2);
  if (strcmp(argv[1], "analyze") == 0)
    return cmd_analyze(argc - 2, argv + 2);
  if (strcmp(argv[1], "version") == 0) {
    printf("gpuprof %s\n", GPUPROF_VERSION_STRING);
    return 0;
  }
  if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 ||
      strcmp(argv[1], "help") == 0) {
    usage(stdout);
    return 0;
  }
  fprintf(stderr, "gpuprof: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
