/* CUDA graph node id -> the host stack of the call that created the node (capture time). */
#ifndef GPUPROF_AGENT_GRAPH_MAP_H
#define GPUPROF_AGENT_GRAPH_MAP_H

#include <stddef.h>
#include <stdint.h>

/*
 * A replayed kernel, memcpy or memset record carries the graphNodeId of the node it ran as,
 * and nothing about the code that put it in the graph; GRAPHNODE_CREATED fires inside the
 * API call that created the node (a launch on a capturing stream, cuGraphAddKernelNode), so
 * that is when its stack is known (cupti.md 1.2 item 6, 6.7).
 *
 * Node ids are process-unique and never reused, so entries are only added, never removed.
 * One mutex serializes everything: writers run at capture and instantiation time (never per
 * launch), the one reader is the worker (once per replayed record), so it is uncontended in
 * steady state, and a grown table can be unmapped at once. The table is mmapped, never
 * malloced (16 bytes a slot, at most half full), and grows by doubling up to max_nodes,
 * after which the map forgets the nodes that were neither created nor replayed during a whole
 * generation (max_nodes / 2 insertions): a graph that keeps being replayed keeps its
 * attribution in a process that makes and destroys graphs without end, and memory stays
 * bounded. (Entries are not removed at GRAPHNODE_DESTROY_STARTING: records of a replay can
 * still be in flight after the exec is destroyed.)
 */
struct graph_map;

/* Bound of the process-wide map (entries, both generations). */
#define GRAPH_MAP_MAX_NODES (1u << 20)

struct graph_map_stats {
  uint64_t nodes;  /* entries recorded (promotions from the previous generation included) */
  uint64_t drops;  /* nodes forgotten unused for a generation, or not recorded (mmap failed) */
  uint64_t clones; /* clone entries made from a known original */
};

/* max_nodes is at least 1; the map reserves nothing until the first set. NULL on failure. */
struct graph_map *graph_map_new(size_t max_nodes);
void graph_map_free(struct graph_map *m);

/* node_id -> stack_id (both non-zero). 0, -EINVAL or -ENOMEM (counted as a drop). */
int graph_map_set(struct graph_map *m, uint64_t node_id, uint32_t stack_id);

/* The clone gets the original's stack. 0, -ENOENT (original unknown: nothing recorded), or
 * graph_map_set's errors. */
int graph_map_clone(struct graph_map *m, uint64_t original_id, uint64_t clone_id);

/* The stack of node_id, or 0 (STACK_ID_NONE) when unknown; a hit in the previous generation
 * moves the entry to the current one. */
uint32_t graph_map_get(struct graph_map *m, uint64_t node_id);

void graph_map_get_stats(const struct graph_map *m, struct graph_map_stats *out);

/*
 * The process-wide map the subscriber fills and the worker reads. graph_map_global() makes
 * it on first use (GRAPH_MAP_MAX_NODES; NULL if that failed); graph_map_peek() returns it
 * only if it exists, so a process without graphs never creates one.
 */
struct graph_map *graph_map_global(void);
struct graph_map *graph_map_peek(void);

/* The stack a replayed record with this graph node id is attributed to, 0 for none (not
 * from a graph, no map, or a node whose creation the agent did not see). */
static inline uint32_t graph_map_lookup(uint64_t node_id)
{
  struct graph_map *m;

  if (!node_id || !(m = graph_map_peek()))
    return 0;
  return graph_map_get(m, node_id);
}

#endif
