/* The capture summary: the JSON file of docs/SUMMARY.md and the human version on stderr. */
#ifndef GPUPROF_AGENT_SUMMARY_H
#define GPUPROF_AGENT_SUMMARY_H

#include <stddef.h>
#include <stdint.h>

#include "agent/alloc_map.h"
#include "agent/worker.h"
#include "cupti/subscriber.h"

struct aggregate;
struct config;
struct json_writer;
struct stack_table;

/* Everything the summary reports, gathered by the exit path. Pointers may be NULL (inactive). */
struct summary_input {
  const struct config *cfg;
  int pid;
  int active;
  const char *inactive_reason; /* "" when active */
  uint32_t cupti_version;      /* 0 if no CUPTI was loaded */
  const char *cupti_path;      /* "" if none */
  struct subscriber_stats api;
  struct aggregate *agg;
  const struct alloc_map_stats *mem;
  struct worker_stats worker;
  uint64_t buffer_pool_exhausted;
  struct alloc_map *allocs;   /* live allocations by stack; may be NULL */
  struct stack_table *stacks; /* NULL: no "stacks" section (stacks off) */
};

/* Writes the version-1 JSON document (deterministic order) to w. 0 or -errno. */
int summary_write_json(const struct summary_input *in, struct json_writer *w);

/* The file: GPUPROF_SUMMARY_FILE, or <GPUPROF_OUTPUT_DIR>/gpuprof-<host>-<pid>-summary.json;
 * the directory is created, the file written atomically (temporary file + rename). On error
 * one line on stderr names the path and the reason. path (if non-NULL) receives the path. */
int summary_write_file(const struct summary_input *in, char *path, size_t path_len);

/* The one-screen human version, to stderr. */
void summary_print(const struct summary_input *in, const char *written_to);

#endif
