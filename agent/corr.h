/* Correlation table: CUPTI correlation id -> the API call (thread, domain, cbid, name, times). */
#ifndef GPUPROF_AGENT_CORR_H
#define GPUPROF_AGENT_CORR_H

#include <stddef.h>
#include <stdint.h>

enum corr_domain {
  CORR_DOMAIN_RUNTIME = 1,
  CORR_DOMAIN_DRIVER = 2,
};

/* What an application thread recorded about one API call. */
struct corr_info {
  uint32_t corr_id;
  uint32_t parent_corr_id; /* the outermost open call on the thread for a nested call, else 0 */
  uint32_t tid;            /* gettid() of the calling thread */
  uint16_t cbid;
  uint8_t domain;       /* enum corr_domain */
  const char *api_name; /* CUPTI's functionName: a global constant, kept as a pointer */
  uint64_t enter_ns;    /* CLOCK_REALTIME */
  uint64_t exit_ns;     /* 0 until the call returned; set only during trace captures (the
                           subscriber reads no exit clock otherwise); µs precision past 18 min */
  uint32_t stack_id;    /* host stack (agent/stack.h), STACK_ID_NONE when none was taken */
  uint32_t weight;      /* calls this one stands for: the sample period, 1, or 0 (not sampled) */
};

/*
 * A power-of-two ring indexed by correlation id. CUPTI hands out ids from one process-wide
 * counter, so slot (id & mask) is reused only after `size` later calls: by then the device
 * records of the old call have almost always been decoded. When they have not, the slot
 * holds another id, the lookup fails, and the device event is counted as having an unknown
 * correlation, never misattributed.
 *
 * Concurrency: writers are application threads inside CUPTI callbacks, the reader is the
 * worker. Each slot is a seqlock whose fields are relaxed atomics: no lock, no malloc after
 * corr_table_new. A writer that finds its slot busy (another writer exactly `size` ids apart,
 * in the same instant) skips the write and counts a collision rather than waiting. The exit
 * time is one word tagged with its call's id, stored at EXIT without a seqlock round (no
 * locked instruction on the EXIT path); a late EXIT cannot give a newer call its time.
 */
struct corr_table;

/* entries is rounded up to a power of two (at least 1024). NULL on allocation failure. */
struct corr_table *corr_table_new(size_t entries);
void corr_table_free(struct corr_table *t);

/* API ENTER: records *info (info->exit_ns is ignored). */
void corr_table_enter(struct corr_table *t, const struct corr_info *info);
/* API EXIT: sets the exit time if the slot still holds corr_id. */
void corr_table_exit(struct corr_table *t, uint32_t corr_id, uint64_t exit_ns);
/* 0 and *out filled, or -ENOENT (never seen, or overwritten by a later call). */
int corr_table_lookup(struct corr_table *t, uint32_t corr_id, struct corr_info *out);

size_t corr_table_size(const struct corr_table *t);
uint64_t corr_table_collisions(struct corr_table *t);

#endif
