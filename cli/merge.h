/* gpuprof merge: several processes' capture traces in one file, on one clock. */
#ifndef GPUPROF_CLI_MERGE_H
#define GPUPROF_CLI_MERGE_H

#include <stddef.h>

/*
 * Merges the traces paths[0..n) (the agent's .json/.json.gz, or its .pftrace; one family)
 * into out, or, when out is NULL, into a new file next to the first input. The path written
 * goes to written. Problems are reported on stderr, one line each. Returns 0, 2 when an input
 * or the output name is unusable (not the agent's trace, unfinished JSON, mixed families),
 * 1 on an I/O error.
 */
int merge_traces(const char *out, const char *const *paths, size_t n, char *written,
                 size_t written_len);

/* `gpuprof merge [-o OUT] FILE...`; argv after "merge". */
int cmd_merge(int argc, char **argv);

#endif
