/* The stack table: interns host call stacks into dense ids (a trace tree of (parent, frame)). */
#ifndef GPUPROF_AGENT_STACK_H
#define GPUPROF_AGENT_STACK_H

#include <stddef.h>
#include <stdint.h>

/* Ids: 0 is "no stack" (not captured, unsampled, or dropped); real stacks are 1..N. */
#define STACK_ID_NONE 0u

/* Frames are return addresses of native calls, or Python frames tagged with this bit
 * (agent/pystack.h); user-space addresses never have it set. */
#define STACK_FRAME_PYTHON (1ull << 63)

/* Deepest stack the table accepts (longer ones are cut at the root side). */
#define STACK_MAX_DEPTH 128

/*
 * A prefix tree like heaptrack's trace tree: node = (parent id, frame) -> id, walked from the
 * outermost frame to the leaf, so memory grows with distinct call-path prefixes (a new stack
 * below a known caller costs only its new frames), never with events. A stack's id is its
 * leaf node's id; ids are dense (1..N in creation order), which lets later consumers (pprof
 * locations) index arrays by them, and a parent link is all a reader needs to rebuild a stack.
 *
 * Concurrency: lookups of known paths (the steady state) take no lock and allocate nothing:
 * they probe an open-addressing index of node ids whose entries are published with a release
 * store after the node is written. Only a node never seen before takes the table's mutex for
 * a few dozen instructions (re-probe, append, publish); when the index passes half full, that
 * writer builds a twice larger one and publishes it, and the old index stays mapped (readers
 * may still be in it) until stack_table_free. Nodes live in one address range reserved up
 * front and committed page by page as ids grow. When max_bytes would be exceeded, no node is
 * added: the stack is counted as dropped and interned as STACK_ID_NONE.
 */
struct stack_table;

struct stack_table_stats {
  uint64_t nodes;  /* ids handed out (frames of distinct prefixes) */
  uint64_t stacks; /* distinct ids returned as whole stacks */
  uint64_t bytes;  /* memory in use: nodes plus every index built */
  uint64_t max_bytes;
  uint64_t interned; /* stack_table_intern calls with at least one frame */
  uint64_t drops;    /* stacks not interned because the table was full */
};

/* max_bytes: the cap (at least 64K). NULL on failure. */
struct stack_table *stack_table_new(size_t max_bytes);
void stack_table_free(struct stack_table *t);

/* frames[0] is the leaf (innermost call), frames[n - 1] the outermost. Safe from any thread,
 * from CUPTI callbacks: no malloc, no lock unless a new node is added. */
uint32_t stack_table_intern(struct stack_table *t, const uint64_t *frames, int n);

/* One node: its frame and parent (0 for an outermost frame). 0 or -ENOENT. */
int stack_table_node(const struct stack_table *t, uint32_t id, uint64_t *frame, uint32_t *parent);

/* The stack of id, leaf first, into frames (at most max). Returns the number of frames. */
int stack_table_get(const struct stack_table *t, uint32_t id, uint64_t *frames, int max);

/* Calls fn for every node in id order (parents before children). */
void stack_table_for_each(const struct stack_table *t,
                          void (*fn)(uint32_t id, uint32_t parent, uint64_t frame, void *arg),
                          void *arg);

void stack_table_get_stats(const struct stack_table *t, struct stack_table_stats *out);

#endif
