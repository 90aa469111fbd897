/* Decodes CUPTI activity buffers and records (13.0 layouts) into the agent's event model. */
#ifndef GPUPROF_CUPTI_DECODE_H
#define GPUPROF_CUPTI_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include <cupti.h>

#include "agent/event.h"

struct decode_stats {
  uint64_t records;         /* records read */
  uint64_t events;          /* records turned into events */
  uint64_t zero_timestamps; /* GPU records without timing */
  uint64_t invalid_records; /* buffers that ended in an unknown record kind (or another error) */
};

/*
 * Fills *ev from one record. Returns 0, or -ENOENT for a kind the agent does not model.
 * Frees what CUPTI hands to the client (Device5.name, Overhead3.overheadData) and clears the
 * pointer in the record, so a record must be decoded once.
 */
int decode_record(CUpti_Activity *record, struct event *ev);

typedef void (*decode_event_fn)(const struct event *ev, void *arg);

/*
 * Walks a completed buffer with cuptiActivityGetNextRecord only (a newer CUPTI's records are
 * larger than ours, so stepping by sizeof would misread them), calling fn for every event.
 * Stops at the end of valid_size, or at an unknown kind (counted in invalid_records: CUPTI
 * cannot tell where that record ends, so the rest of the buffer is unreadable).
 */
void decode_buffer(uint8_t *buffer, size_t valid_size, decode_event_fn fn, void *arg,
                   struct decode_stats *st);

#endif
