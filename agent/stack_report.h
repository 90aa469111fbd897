/* The summary's "stacks" section and the human summary's top chains (docs/SUMMARY.md). */
#ifndef GPUPROF_AGENT_STACK_REPORT_H
#define GPUPROF_AGENT_STACK_REPORT_H

struct aggregate;
struct alloc_map;
struct fd_writer;
struct json_writer;
struct stack_table;

#define STACK_REPORT_TOP 20
#define STACK_REPORT_TOP_HUMAN 3

struct stack_report_input {
  struct aggregate *agg; /* locked by the caller */
  struct alloc_map *allocs;
  struct stack_table *stacks;
  const char *policy;
  unsigned sample_every;
  unsigned depth;
};

/* Writes the "stacks" key and its object. Symbolizes on the calling thread (exit path). */
void stack_report_write_json(const struct stack_report_input *in, struct json_writer *w);

/* The top chains by GPU time and by memory in use, a few lines on the human summary. */
void stack_report_print(const struct stack_report_input *in, struct fd_writer *fw);

#endif
