/* gpuprof analyze: where a capture's GPU time went, and which rank an NCCL hang waits for. */
#ifndef GPUPROF_CLI_ANALYZE_H
#define GPUPROF_CLI_ANALYZE_H

/* `gpuprof analyze [--json FILE|-] TRACE...`; argv after "analyze". Exit status: 0, 1 on an
 * I/O error, 2 when an input is not a gpuprof trace (one line on stderr naming it). */
int cmd_analyze(int argc, char **argv);

#endif
