/* The summary's "stacks" section and the human summary's top chains (docs/SUMMARY.md). */
#include "agent/stack_report.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/aggregate.h"
#include "agent/alloc_map.h"
#include "agent/stack.h"
#include "agent/symbolize.h"
#include "agent/util/fdwriter.h"
#include "agent/util/hash.h"
#include "export/json.h"

#define HUMAN_FRAMES 8

struct live_stack {
  uint32_t stack_id;
  uint64_t bytes, allocations;
};

struct live_table {
  struct live_stack *slots;
  size_t cap, used;
  uint64_t bytes_without_stack, allocations_without_stack;
  int oom;
};

static void live_add(const struct alloc_info *info, void *arg)
{
  struct live_table *t = arg;
  size_t i;

  if (!info->stack_id) {
    t->bytes_without_stack += info->size;
    t->allocations_without_stack++;
    return;
  }
  if ((t->used + 1) * 2 > t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 256;
    struct live_stack *s = calloc(cap, sizeof(*s));
    if (!s) {
      t->oom = 1;
      return;
    }
    for (size_t j = 0; j < t->cap; j++) {
      if (!t->slots[j].stack_id)
        continue;
      for (i = hash_u64(t->slots[j].stack_id) & (cap - 1); s[i].stack_id; i = (i + 1) & (cap - 1))
        ;
      s[i] = t->slots[j];
    }
    free(t->slots);
    t->slots = s;
    t->cap = cap;
  }
  for (i = hash_u64(info->stack_id) & (t->cap - 1);
       t->slots[i].stack_id && t->slots[i].stack_id != info->stack_id; i = (i + 1) & (t->cap - 1))
    ;
  if (!t->slots[i].stack_id) {
    t->slots[i].stack_id = info->stack_id;
    t->used++;
  }
  t->slots[i].bytes += info->size;
  t->slots[i].allocations++;
}

static int cmp_live(const void *x, const void *y)
{
  const struct live_stack *a = x, *b = y;

  if (a->bytes != b->bytes)
    return a->bytes > b->bytes ? -1 : 1;
  return a->stack_id < b->stack_id ? -1 : a->stack_id > b->stack_id;
}

/* The live allocations grouped by stack, sorted by bytes desc (compacted into t->slots). */
static void live_collect(struct alloc_map *m, struct live_table *t)
{
  size_t n = 0;

  memset(t, 0, sizeof(*t));
  if (!m)
    return;
  alloc_map_for_each(m, live_add, t);
  for (size_t i = 0; i < t->cap; i++)
    if (t->slots[i].stack_id)
      t->slots[n++] = t->slots[i];
  t->used = n;
  if (n)
    qsort(t->slots, n, sizeof(*t->slots), cmp_live);
}

/* "name" for a resolved native frame, "module+0xoffset" or "0xaddress" otherwise. */
static const char *frame_label(const struct sym_frame *f, uint64_t frame, char *buf, size_t len)
{
  if (f->function)
    return f->function;
  if (f->module)
    snprintf(buf, len, "%s+0x%llx", f->module, (unsigned long long)f->module_offset);
  else
    snprintf(buf, len, "0x%llx", (unsigned long long)frame);
  return buf;
}

static void write_frames(struct json_writer *w, struct symbolizer *sym, struct stack_table *t,
                         uint32_t stack_id, const char *kernel)
{
  uint64_t frames[STACK_MAX_DEPTH];
  int n = stack_table_get(t, stack_id, frames, STACK_MAX_DEPTH);
  char buf[512];

  json_writer_key(w, "frames");
  json_writer_begin_array(w);
  if (kernel) {
    json_writer_begin_object(w);
    json_writer_kv_string(w, "kernel", kernel);
    json_writer_end_object(w);
  }
  for (int i = 0; i < n; i++) {
    struct sym_frame f;

    symbolizer_resolve(sym, frames[i], &f);
    json_writer_begin_object(w);
    if (f.python) {
      json_writer_kv_string(w, "function", f.function ? f.function : "?");
      json_writer_kv_string(w, "file", f.file ? f.file : "?");
      json_writer_kv_int(w, "line", f.line);
    } else {
      json_writer_kv_string(w, "function", frame_label(&f, frames[i], buf, sizeof(buf)));
      json_writer_kv_string(w, "module", f.module ? f.module : "?");
    }
    json_writer_end_object(w);
  }
  json_writer_end_array(w);
}

void stack_report_write_json(const struct stack_report_input *in, struct json_writer *w)
{
  const struct agg_totals *t = aggregate_totals(in->agg);
  struct agg_stack_kernel **kernels = NULL;
  struct agg_stack_copy **copies = NULL;
  struct stack_table_stats st;
  struct symbolizer *sym = symbolizer_new();
  struct live_table live;
  size_t nk, nc;

  stack_table_get_stats(in->stacks, &st);
  nk = aggregate_stack_kernels_sorted(in->agg, &kernels);
  nc = aggregate_stack_copies_sorted(in->agg, &copies);
  live_collect(in->allocs, &live);

  json_writer_key(w, "stacks");
  json_writer_begin_object(w);
  json_writer_kv_string(w, "policy", in->policy);
  json_writer_kv_uint(w, "sample_every", in->sample_every);
  json_writer_kv_uint(w, "depth", in->depth);
  json_writer_kv_string(w, "order", "leaf_first");

  json_writer_key(w, "table");
  json_writer_begin_object(w);
  json_writer_kv_uint(w, "stacks", st.stacks);
  json_writer_kv_uint(w, "nodes", st.nodes);
  json_writer_kv_uint(w, "bytes", st.bytes);
  json_writer_kv_uint(w, "max_bytes", st.max_bytes);
  json_writer_kv_uint(w, "captured", st.interned);
  json_writer_kv_uint(w, "drops", st.drops);
  json_writer_end_object(w);

  json_writer_key(w, "by_kernel_time");
  json_writer_begin_array(w);
  for (size_t i = 0; i < nk && i < STACK_REPORT_TOP && sym; i++) {
    const char *name = symbolizer_demangle(sym, kernels[i]->kernel->name);
    json_writer_begin_object(w);
    json_writer_kv_uint(w, "stack", kernels[i]->stack_id);
    json_writer_kv_string(w, "kernel", name);
    json_writer_kv_uint(w, "launches", kernels[i]->launches);
    json_writer_kv_uint(w, "sampled", kernels[i]->samples);
    json_writer_kv_uint(w, "gpu_time_ns", kernels[i]->gpu_time_ns);
    write_frames(w, sym, in->stacks, kernels[i]->stack_id, name);
    json_writer_end_object(w);
  }
  json_writer_end_array(w);
  json_writer_key(w, "kernels_without_stack");
  json_writer_begin_object(w);
  json_writer_kv_uint(w, "launches", t->kernels_without_stack);
  json_writer_kv_uint(w, "gpu_time_ns", t->kernel_time_without_stack_ns);
  json_writer_end_object(w);

  json_writer_key(w, "by_memory_in_use");
  json_writer_begin_array(w);
  for (size_t i = 0; i < live.used && i < STACK_REPORT_TOP && sym; i++) {
    json_writer_begin_object(w);
    json_writer_kv_uint(w, "stack", live.slots[i].stack_id);
    json_writer_kv_uint(w, "bytes", live.slots[i].bytes);
    json_writer_kv_uint(w, "allocations", live.slots[i].allocations);
    write_frames(w, sym, in->stacks, live.slots[i].stack_id, NULL);
    json_writer_end_object(w);
  }
  json_writer_end_array(w);
  json_writer_key(w, "memory_in_use_without_stack");
  json_writer_begin_object(w);
  json_writer_kv_uint(w, "bytes", live.bytes_without_stack);
  json_writer_kv_uint(w, "allocations", live.allocations_without_stack);
  json_writer_end_object(w);

  json_writer_key(w, "by_memcpy_bytes");
  json_writer_begin_array(w);
  for (size_t i = 0; i < nc && i < STACK_REPORT_TOP && sym; i++) {
    json_writer_begin_object(w);
    json_writer_kv_uint(w, "stack", copies[i]->stack_id);
    json_writer_kv_uint(w, "bytes", copies[i]->bytes);
    json_writer_kv_uint(w, "count", copies[i]->count);
    json_writer_kv_uint(w, "gpu_time_ns", copies[i]->gpu_time_ns);
    write_frames(w, sym, in->stacks, copies[i]->stack_id, NULL);
    json_writer_end_object(w);
  }
  json_writer_end_array(w);
  json_writer_key(w, "memcpys_without_stack");
  json_writer_begin_object(w);
  json_writer_kv_uint(w, "count", t->memcpys_without_stack);
  json_writer_kv_uint(w, "bytes", t->memcpy_bytes_without_stack);
  json_writer_end_object(w);
  json_writer_end_object(w);

  free(kernels);
  free(copies);
  free(live.slots);
  symbolizer_free(sym);
}

/* "leaf <- caller <- ..." on one line, at most HUMAN_FRAMES frames. */
static void print_chain(struct fd_writer *fw, struct symbolizer *sym, struct stack_table *t,
                        uint32_t stack_id, const char *first)
{
  uint64_t frames[STACK_MAX_DEPTH];
  int n = stack_table_get(t, stack_id, frames, STACK_MAX_DEPTH);
  char buf[512];

  if (first)
    fd_writer_printf(fw, "%.120s", first);
  for (int i = 0; i < n && i < HUMAN_FRAMES; i++) {
    struct sym_frame f;
    symbolizer_resolve(sym, frames[i], &f);
    fd_writer_printf(fw, "%s%.120s", i || first ? " <- " : "",
                     frame_label(&f, frames[i], buf, sizeof(buf)));
  }
  if (n > HUMAN_FRAMES)
    fd_writer_printf(fw, " <- ... (%d more)", n - HUMAN_FRAMES);
  fd_writer_printf(fw, "\n");
}

void stack_report_print(const struct stack_report_input *in, struct fd_writer *fw)
{
  struct agg_stack_kernel **kernels = NULL;
  struct symbolizer *sym = symbolizer_new();
  struct live_table live;
  size_t nk;

  if (!sym)
    return;
  nk = aggregate_stack_kernels_sorted(in->agg, &kernels);
  live_collect(in->allocs, &live);
  if (nk)
    fd_writer_printf(fw, "gpuprof:   top host stacks by GPU time (leaf first%s):\n",
                     in->sample_every > 1 ? ", sampled launches weighted" : "");
  for (size_t i = 0; i < nk && i < STACK_REPORT_TOP_HUMAN; i++) {
    fd_writer_printf(fw, "gpuprof:     %zu. %llu ns, %llu launches: ", i + 1,
                     (unsigned long long)kernels[i]->gpu_time_ns,
                     (unsigned long long)kernels[i]->launches);
    print_chain(fw, sym, in->stacks, kernels[i]->stack_id,
                symbolizer_demangle(sym, kernels[i]->kernel->name));
  }
  if (live.used)
    fd_writer_printf(fw, "gpuprof:   top host stacks by GPU memory in use at exit:\n");
  for (size_t i = 0; i < live.used && i < STACK_REPORT_TOP_HUMAN; i++) {
    fd_writer_printf(fw, "gpuprof:     %zu. %llu bytes in %llu allocations: ", i + 1,
                     (unsigned long long)live.slots[i].bytes,
                     (unsigned long long)live.slots[i].allocations);
    print_chain(fw, sym, in->stacks, live.slots[i].stack_id, NULL);
  }
  free(kernels);
  free(live.slots);
  symbolizer_free(sym);
}
