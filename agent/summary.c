/* The capture summary: the JSON file of docs/SUMMARY.md and the human version on stderr. */
#define LOG_MODULE "summary"
#include "agent/summary.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/aggregate.h"
#include "agent/capture.h"
#include "agent/config.h"
#include "agent/graph_map.h"
#include "agent/nccl.h"
#include "agent/hoststack.h"
#include "agent/oom.h"
#include "agent/stack_report.h"
#include "agent/uploader.h"
#include "agent/util/demangle.h"
#include "agent/util/fdwriter.h"
#include "agent/util/files.h"
#include "export/format.h"
#include "agent/util/log.h"
#include "export/json.h"
#include "gpuprof/gpuprof.h"

#define SUMMARY_FORMAT_VERSION 1
#define TOP_KERNELS 10

/* ---- JSON ---- */

static void write_bucket(struct json_writer *w, const char *key, uint64_t count, uint64_t bytes,
                         const char *time_key, uint64_t time_ns, int with_bytes)
{
  json_writer_key(w, key);
  json_writer_begin_object(w);
  json_writer_kv_uint(w, "count", count);
  if (with_bytes)
    json_writer_kv_uint(w, "bytes", bytes);
  json_writer_kv_uint(w, time_key, time_ns);
  json_writer_end_object(w);
}

/* "name" stays CUPTI's mangled name, the key scripts match on; "demangled" is added only
 * when the name demangles (each entry is a distinct name: nothing to cache). */
static void write_kernel(struct json_writer *w, const struct agg_kernel *k)
{
  char *demangled = demangle_alloc(k->name);

  json_writer_begin_object(w);
  json_writer_kv_string(w, "name", k->name);
  if (demangled)
    json_writer_kv_string(w, "demangled", demangled);
  free(demangled);
  json_writer_kv_uint(w, "count", k->count);
  json_writer_kv_uint(w, "gpu_time_ns", k->gpu_time_ns);
  json_writer_key(w, "apis");
  json_writer_begin_object(w);
  for (uint32_t i = 0; i < k->n_apis; i++)
    json_writer_kv_uint(w, k->apis[i].api, k->apis[i].count);
  json_writer_end_object(w);
  /* streams are sorted by device first, so unique devices come out ascending. */
  json_writer_key(w, "devices");
  json_writer_begin_array(w);
  for (uint32_t i = 0; i < k->n_streams; i++)
    if (i == 0 || k->streams[i].device != k->streams[i - 1].device)
      json_writer_uint(w, k->streams[i].device);
  json_writer_end_array(w);
  json_writer_key(w, "streams");
  json_writer_begin_array(w);
  for (uint32_t i = 0; i < k->n_streams; i++) {
    json_writer_begin_array(w);
    json_writer_uint(w, k->streams[i].device);
    json_writer_uint(w, k->streams[i].context);
    json_writer_uint(w, k->streams[i].stream);
    json_writer_end_array(w);
  }
  json_writer_end_array(w);
  json_writer_end_object(w);
}

/* Only when a Pyroscope URL is configured (docs/PYROSCOPE.md has what the counts mean). */
static void write_pyroscope(struct json_writer *w)
{
  struct uploader_stats us;
  int enabled;

  uploader_get_stats(&us, &enabled);
  if (!enabled)
    return;
  json_writer_key(w, "pyroscope");
  json_writer_begin_object(w);
  json_writer_kv_uint(w, "submitted", us.submitted);
  json_writer_kv_uint(w, "sent", us.sent);
  json_writer_kv_uint(w, "retried", us.retried);
  json_writer_kv_uint(w, "dropped", us.dropped);
  json_writer_kv_uint(w, "failed", us.failed);
  json_writer_kv_uint(w, "bytes_sent", us.bytes_sent);
  json_writer_end_object(w);
}

static void write_memory(struct json_writer *w, const struct alloc_map_stats *mem)
{
  json_writer_key(w, "memory");
  json_writer_begin_array(w);
  for (int i = 0; mem && i <= ALLOC_MAX_DEVICES; i++) {
    const struct alloc_device_stats *d = &mem->dev[i];
    if (!d->allocs && !d->frees)
      continue;
    json_writer_begin_object(w);
    json_writer_kv_int(w, "device", i - 1);
    json_writer_kv_uint(w, "allocs", d->allocs);
    json_writer_kv_uint(w, "frees", d->frees);
    json_writer_kv_uint(w, "bytes_allocated", d->bytes_allocated);
    json_writer_kv_uint(w, "bytes_freed", d->bytes_freed);
    json_writer_kv_uint(w, "in_use", d->in_use);
    json_writer_kv_uint(w, "peak_in_use", d->peak_in_use);
    json_writer_key(w, "by_kind");
    json_writer_begin_object(w);
    for (int k = 0; k < ALLOC_KIND_COUNT; k++)
      if (d->by_kind[k])
        json_writer_kv_uint(w, alloc_kind_name((enum alloc_kind)k), d->by_kind[k]);
    json_writer_end_object(w);
    json_writer_end_object(w);
  }
  json_writer_end_array(w);
}

/* Trace captures (agent/capture.h), when one was started: how many, the last one's outcome. */
static void write_captures(struct json_writer *w)
{
  struct capture_status st;

  capture_get_status(&st);
  if (!st.id)
    return;
  json_writer_key(w, "captures");
  json_writer_begin_object(w);
  json_writer_kv_uint(w, "count", st.id);
  json_writer_key(w, "running");
  json_writer_bool(w, st.state == CAPTURE_RUNNING);
  json_writer_key(w, "last");
  json_writer_begin_object(w);
  json_writer_kv_uint(w, "id", st.id);
  json_writer_kv_uint(w, "gpu_only", (uint64_t)st.gpu_only);
  json_writer_kv_uint(w, "started_ns", st.started_ns);
  json_writer_kv_uint(w, "ends_ns", st.ends_ns);
  json_writer_kv_uint(w, "events", st.events);
  json_writer_kv_uint(w, "bytes", st.bytes);
  json_writer_kv_uint(w, "dropped", st.dropped);
  json_writer_key(w, "truncated");
  json_writer_bool(w, st.truncated);
  json_writer_kv_int(w, "error", st.last_error);
  json_writer_key(w, "files");
  json_writer_begin_array(w);
  for (size_t i = 0; i < st.n_files && i < CAPTURE_MAX_FILES; i++)
    json_writer_string(w, st.files[i]);
  json_writer_end_array(w);
  json_writer_end_object(w);
  json_writer_end_object(w);
}

/* CUDA-graph node attribution (docs/PROFILES.md), when the process made graph nodes. */
static void write_graphs(struct json_writer *w, const struct summary_input *in)
{
  struct graph_map_stats st;

  if (!in->api.graph_nodes)
    return;
  graph_map_get_stats(graph_map_peek(), &st);
  json_writer_key(w, "graphs");
  json_writer_begin_object(w);
  json_writer_kv_uint(w, "node_callbacks", in->api.graph_nodes);
  json_writer_kv_uint(w, "nodes_with_stack", st.nodes);
  json_writer_kv_uint(w, "nodes_from_clones", st.clones);
  json_writer_kv_uint(w, "nodes_forgotten", st.drops);
  json_writer_end_object(w);
}

#define NCCL_PENDING_SHOWN 16u

/* The NCCL ops still pending at exit (agent/nccl.h nccl_pending): how many, and the oldest
 * NCCL_PENDING_SHOWN, the ones a hang is diagnosed from (docs/SUMMARY.md). */
static void write_nccl_pending(struct json_writer *w)
{
  const struct nccl_pending *p;
  uint64_t at;
  unsigned n = nccl_pending_at_exit(&p, &at);
  char hash[24];

  json_writer_kv_uint(w, "ops_pending", n);
  json_writer_key(w, "pending");
  json_writer_begin_array(w);
  for (unsigned i = 0; i < n && i < NCCL_PENDING_SHOWN; i++) {
    const struct nccl_comm *c = nccl_comm_get(p[i].v.comm);
    json_writer_begin_object(w);
    /* A string: a 64-bit hash does not survive a JSON number (a double). */
    snprintf(hash, sizeof(hash), "%016llx", (unsigned long long)(c ? c->hash : 0));
    json_writer_kv_string(w, "comm", hash);
    if (c && c->name[0])
      json_writer_kv_string(w, "comm_name", c->name);
    json_writer_kv_int(w, "rank", c ? c->rank : 0);
    json_writer_kv_int(w, "nranks", c ? c->nranks : 0);
    json_writer_kv_uint(w, "device", p[i].device);
    json_writer_kv_string(w, "func", p[i].v.func);
    if (p[i].v.seq != UINT64_MAX)
      json_writer_kv_uint(w, "seq", p[i].v.seq);
    json_writer_kv_uint(w, "count", p[i].v.count);
    json_writer_kv_uint(w, "bytes", p[i].v.bytes);
    json_writer_kv_string(w, "state", p[i].launched ? "launched, not finished" : "not launched");
    json_writer_kv_uint(w, "age_ms",
                        at > p[i].v.api_start_ns ? (at - p[i].v.api_start_ns) / 1000000u : 0);
    json_writer_end_object(w);
  }
  json_writer_end_array(w);
}

/* NCCL operations seen through the profiler plugin (docs/SUMMARY.md), when a plugin was
 * initialised: what was joined to a kernel, what was lost, and per func the joined ops. */
static void write_nccl(struct json_writer *w)
{
  struct nccl_func_total f[NCCL_FUNC_COUNT];
  struct nccl_stats st;
  unsigned n;

  nccl_get_stats(&st);
  if (!st.comms && !st.comms_dropped)
    return;
  n = nccl_get_func_totals(f, NCCL_FUNC_COUNT);
  json_writer_key(w, "nccl");
  json_writer_begin_object(w);
  json_writer_kv_uint(w, "comms", st.comms);
  json_writer_kv_uint(w, "comms_dropped", st.comms_dropped);
  json_writer_kv_uint(w, "ops", st.ops);
  json_writer_kv_uint(w, "ops_joined", st.ops_joined);
  json_writer_kv_uint(w, "ops_unjoined", st.ops_unjoined);
  json_writer_kv_uint(w, "ops_dropped", st.ops_dropped);
  json_writer_kv_uint(w, "ops_overflow", st.ops_overflow);
  json_writer_kv_uint(w, "launch_conflicts", st.launch_conflicts);
  json_writer_kv_uint(w, "ignored_events", st.ignored_events);
  json_writer_kv_uint(w, "kernels", st.kernels);
  write_nccl_pending(w);
  json_writer_key(w, "funcs");
  json_writer_begin_object(w);
  for (unsigned i = 0; i < n; i++) {
    json_writer_key(w, f[i].func);
    json_writer_begin_object(w);
    json_writer_kv_uint(w, "ops", f[i].ops);
    json_writer_kv_uint(w, "bytes", f[i].bytes);
    json_writer_kv_uint(w, "gpu_time_ns", f[i].gpu_ns);
    json_writer_end_object(w);
  }
  json_writer_end_object(w);
  json_writer_end_object(w);
}

/* Allocations that failed for lack of memory (agent/oom.h), when there were any. */
static void write_oom(struct json_writer *w)
{
  struct oom_stats st;
  char api[64];

  oom_get_stats(&st);
  if (!st.failed)
    return;
  json_writer_key(w, "oom");
  json_writer_begin_object(w);
  json_writer_kv_uint(w, "failed_allocations", st.failed);
  json_writer_kv_uint(w, "snapshots", st.snapshots);
  json_writer_kv_uint(w, "skipped", st.skipped);
  json_writer_kv_uint(w, "errors", st.errors);
  if (st.have_first) {
    aggregate_api_base_name(st.first.api, api, sizeof(api));
    json_writer_key(w, "first");
    json_writer_begin_object(w);
    json_writer_kv_string(w, "api", api);
    json_writer_kv_uint(w, "bytes", st.first.bytes);
    json_writer_kv_int(w, "device", st.first.device);
    json_writer_kv_uint(w, "time_ns", st.first.time_ns);
    json_writer_kv_uint(w, "tid", st.first.tid);
    json_writer_end_object(w);
  }
  json_writer_end_object(w);
}

int summary_write_json(const struct summary_input *in, struct json_writer *w)
{
  static const struct agg_totals zero;
  const struct agg_totals *t = &zero;
  struct agg_kernel **kernels = NULL;
  struct agg_stream **streams = NULL;
  size_t n_kernels = 0, n_streams = 0;
  int ret;

  if (in->agg) {
    aggregate_lock(in->agg);
    t = aggregate_totals(in->agg);
    n_kernels = aggregate_kernels_sorted(in->agg, &kernels);
    n_streams = aggregate_streams_sorted(in->agg, &streams);
  }

  json_writer_begin_object(w);
  json_writer_kv_uint(w, "version", SUMMARY_FORMAT_VERSION);
  json_writer_kv_string(w, "agent_version", GPUPROF_VERSION_STRING);
  json_writer_kv_int(w, "pid", in->pid);
  json_writer_kv_string(w, "state", in->active ? "active" : "inactive");
  json_writer_kv_string(w, "inactive_reason", in->inactive_reason ? in->inactive_reason : "");
  json_writer_kv_uint(w, "cupti_version", in->cupti_version);
  json_writer_kv_string(w, "cupti_path", in->cupti_path ? in->cupti_path : "");

  /* The first and last timestamps of the device records (0, 0 when none arrived). */
  json_writer_key(w, "window");
  json_writer_begin_object(w);
  json_writer_kv_uint(w, "start_ns", t->window_start_ns);
  json_writer_kv_uint(w, "end_ns", t->window_end_ns);
  json_writer_end_object(w);

  json_writer_key(w, "api");
  json_writer_begin_object(w);
  json_writer_kv_uint(w, "runtime", in->api.api_runtime);
  json_writer_kv_uint(w, "driver", in->api.api_driver);
  json_writer_end_object(w);

  json_writer_key(w, "kernels");
  json_writer_begin_object(w);
  json_writer_kv_uint(w, "count", t->kernels);
  json_writer_kv_uint(w, "gpu_time_ns", t->kernel_time_ns);
  json_writer_key(w, "by_name");
  json_writer_begin_array(w);
  for (size_t i = 0; i < n_kernels; i++)
    write_kernel(w, kernels[i]);
  json_writer_end_array(w);
  json_writer_end_object(w);

  json_writer_key(w, "streams");
  json_writer_begin_array(w);
  for (size_t i = 0; i < n_streams; i++) {
    json_writer_begin_object(w);
    json_writer_kv_uint(w, "device", streams[i]->key.device);
    json_writer_kv_uint(w, "context", streams[i]->key.context);
    json_writer_kv_uint(w, "stream", streams[i]->key.stream);
    json_writer_kv_uint(w, "kernels", streams[i]->kernels);
    json_writer_kv_uint(w, "memcpys", streams[i]->memcpys);
    json_writer_kv_uint(w, "memsets", streams[i]->memsets);
    json_writer_end_object(w);
  }
  json_writer_end_array(w);

  /* Directions in CUPTI's enum order, "unknown" last; only those that occurred. */
  json_writer_key(w, "memcpy");
  json_writer_begin_object(w);
  for (unsigned i = 1; i <= EVENT_COPY_KIND_COUNT; i++) {
    unsigned kind = i % EVENT_COPY_KIND_COUNT;
    const struct agg_bucket *b = &t->memcpy[kind];
    if (b->count)
      write_bucket(w, aggregate_copy_kind_name(kind), b->count, b->bytes, "gpu_time_ns",
                   b->gpu_time_ns, 1);
  }
  json_writer_end_object(w);
  write_bucket(w, "memset", t->memset.count, t->memset.bytes, "gpu_time_ns", t->memset.gpu_time_ns,
               1);
  write_bucket(w, "sync", t->syncs, 0, "time_ns", t->sync_time_ns, 0);

  write_memory(w, in->mem);

  if (in->stacks && in->agg) {
    struct stack_report_input sr = {in->agg,
                                    in->allocs,
                                    in->stacks,
                                    hoststack_policy_name(),
                                    hoststack_sample_every(),
                                    in->cfg->stack_depth};
    stack_report_write_json(&sr, w);
  }

  json_writer_key(w, "joins");
  json_writer_begin_object(w);
  json_writer_kv_uint(w, "runtime", t->joins_runtime);
  json_writer_kv_uint(w, "driver", t->joins_driver);
  json_writer_kv_uint(w, "unknown", t->joins_unknown);
  json_writer_end_object(w);

  write_graphs(w, in);
  write_nccl(w);
  write_captures(w);
  write_oom(w);

  json_writer_key(w, "losses");
  json_writer_begin_object(w);
  json_writer_kv_uint(w, "cupti_dropped_records", in->worker.dropped_records);
  json_writer_kv_uint(w, "zero_timestamps", in->worker.zero_timestamps);
  json_writer_kv_uint(w, "invalid_records", in->worker.invalid_records);
  json_writer_kv_uint(w, "unknown_correlation", t->joins_unknown);
  json_writer_kv_uint(w, "unknown_frees", in->mem ? in->mem->unknown_frees : 0);
  json_writer_kv_uint(w, "buffer_pool_exhausted", in->buffer_pool_exhausted);
  json_writer_kv_uint(w, "lost_buffers", in->worker.lost_buffers);
  json_writer_key(w, "exit_incomplete");
  json_writer_bool(w, in->worker.exit_incomplete != 0);
  json_writer_end_object(w);

  write_pyroscope(w);

  json_writer_end_object(w);
  ret = json_writer_finish(w);

  if (in->agg)
    aggregate_unlock(in->agg);
  free(kernels);
  free(streams);
  return ret;
}

/* ---- the file ---- */

static int default_path(const struct summary_input *in, char *path, size_t len)
{
  char name[320];

  files_name(name, sizeof(name));
  if ((size_t)snprintf(path, len, "%s/gpuprof-%s-summary.json", in->cfg->output_dir, name) >= len)
    return -ENAMETOOLONG;
  return 0;
}

int summary_write_file(const struct summary_input *in, char *out_path, size_t out_len)
{
  char path[PATH_MAX], tmp[PATH_MAX + 32] = "", dir[PATH_MAX];
  const char *what = "write";
  struct json_writer *w = NULL;
  struct fd_writer fw;
  char *slash;
  int fd = -1, ret;

  if (in->cfg->summary_file[0])
    snprintf(path, sizeof(path), "%s", in->cfg->summary_file);
  else if ((ret = default_path(in, path, sizeof(path))) != 0)
    goto out;
  if (out_path)
    snprintf(out_path, out_len, "%s", path);

  snprintf(dir, sizeof(dir), "%s", path);
  slash = strrchr(dir, '/');
  if (slash && slash != dir) {
    *slash = '\0';
    ret = files_mkdir_p(dir, 0755);
    if (ret && (in->cfg->summary_file[0] || files_first_output_error())) {
      char buf[128];
      log_error(
          "cannot create the directory %s for the summary %s: %s; set %s to a writable location",
          dir, path, strerror_r(-ret, buf, sizeof(buf)),
          in->cfg->summary_file[0] ? "GPUPROF_SUMMARY_FILE" : "GPUPROF_OUTPUT_DIR");
    }
    if (ret)
      return ret;
  }

  if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, in->pid) >= sizeof(tmp)) {
    ret = -ENAMETOOLONG;
    goto out;
  }
  /* A predictable name in a possibly shared directory: never follow what is there. */
  unlink(tmp);
  fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    ret = -errno;
    goto out;
  }
  fd_writer_init(&fw, fd);
  w = json_writer_new(fd_writer_sink, &fw, JSON_PRETTY);
  if (!w) {
    ret = -ENOMEM;
    goto out;
  }
  ret = summary_write_json(in, w);
  if (!ret)
    ret = fd_writer_flush(&fw);
  if (!ret && close(fd) != 0)
    ret = -errno;
  fd = -1;
  if (ret)
    goto out;
  what = "rename the temporary file to";
  if (rename(tmp, path) != 0)
    ret = -errno;
out:
  if (fd >= 0)
    close(fd);
  json_writer_free(w);
  if (ret) {
    char buf[128];
    const char *err = strerror_r(-ret, buf, sizeof(buf));
    if (tmp[0])
      unlink(tmp);
    if (in->cfg->summary_file[0] || files_first_output_error())
      log_error("cannot %s the summary %s: %s; set %s to a writable location", what, path, err,
                in->cfg->summary_file[0] ? "GPUPROF_SUMMARY_FILE" : "GPUPROF_OUTPUT_DIR");
  }
  return ret;
}

/* ---- the human version ---- */

static void fmt_ns(uint64_t ns, char *buf, size_t len)
{
  if (ns < 10000)
    snprintf(buf, len, "%llu ns", (unsigned long long)ns);
  else if (ns < 10000000ull)
    snprintf(buf, len, "%.1f us", (double)ns / 1e3);
  else if (ns < 10000000000ull)
    snprintf(buf, len, "%.1f ms", (double)ns / 1e6);
  else
    snprintf(buf, len, "%.2f s", (double)ns / 1e9);
}

/* The NCCL ops pending at exit, oldest first: where each rank's log shows a hang. */
static void print_nccl_pending(struct fd_writer *fw)
{
  const struct nccl_pending *p;
  uint64_t at;
  unsigned n = nccl_pending_at_exit(&p, &at);
  char label[64], seq[32];

  if (!n)
    return;
  fd_writer_printf(fw, "gpuprof:   NCCL: %u ops still pending at exit (a hang?), oldest first:\n",
                   n);
  for (unsigned i = 0; i < n && i < NCCL_PENDING_SHOWN; i++) {
    const struct nccl_comm *c = nccl_comm_get(p[i].v.comm);
    nccl_comm_label(p[i].v.comm, label, sizeof(label));
    if (p[i].v.seq != UINT64_MAX)
      snprintf(seq, sizeof(seq), " seq %llu", (unsigned long long)p[i].v.seq);
    else
      seq[0] = '\0';
    fd_writer_printf(
        fw,
        "gpuprof:     %s%s on comm %s rank %d/%d (GPU %u): %s, %llu bytes, posted %llu ms "
        "before exit\n",
        p[i].v.func, seq, label, c ? c->rank : 0, c ? c->nranks : 0, (unsigned)p[i].device,
        p[i].launched ? "launched, not finished" : "not launched", (unsigned long long)p[i].v.bytes,
        (unsigned long long)(at > p[i].v.api_start_ns ? (at - p[i].v.api_start_ns) / 1000000u : 0));
  }
  if (n > NCCL_PENDING_SHOWN)
    fd_writer_printf(fw, "gpuprof:     ... and %u more (the summary file lists %u)\n",
                     n - NCCL_PENDING_SHOWN, NCCL_PENDING_SHOWN);
}

void summary_print(const struct summary_input *in, const char *written_to)
{
  static const struct agg_totals zero;
  const struct agg_totals *t = &zero;
  struct agg_kernel **kernels = NULL;
  size_t n_kernels = 0;
  struct fd_writer fw;
  char a[32], b[32];
  uint64_t losses;

  fd_writer_init(&fw, 2);
  if (!in->active) {
    fd_writer_printf(&fw, "gpuprof: pid %d: inactive (%s)\n", in->pid, in->inactive_reason);
    goto out;
  }
  aggregate_lock(in->agg);
  t = aggregate_totals(in->agg);
  n_kernels = aggregate_kernels_sorted(in->agg, &kernels);

  fd_writer_printf(&fw, "gpuprof: pid %d summary (CUPTI %u from %s)\n", in->pid, in->cupti_version,
                   in->cupti_path);
  fd_writer_printf(&fw, "gpuprof:   API calls: %llu runtime, %llu driver\n",
                   (unsigned long long)in->api.api_runtime, (unsigned long long)in->api.api_driver);
  fmt_ns(t->kernel_time_ns, a, sizeof(a));
  fd_writer_printf(&fw, "gpuprof:   kernels: %llu launches, %s GPU time%s\n",
                   (unsigned long long)t->kernels, a,
                   n_kernels > TOP_KERNELS ? " (top 10 by GPU time)" : "");
  for (size_t i = 0; i < n_kernels && i < TOP_KERNELS; i++) {
    char *demangled = demangle_alloc(kernels[i]->name);

    fmt_ns(kernels[i]->gpu_time_ns, a, sizeof(a));
    fd_writer_printf(&fw, "gpuprof:     %10s %8llux  %.180s\n", a,
                     (unsigned long long)kernels[i]->count,
                     demangled ? demangled : kernels[i]->name);
    free(demangled);
  }
  for (unsigned i = 1; i <= EVENT_COPY_KIND_COUNT; i++) {
    unsigned kind = i % EVENT_COPY_KIND_COUNT;
    const struct agg_bucket *m = &t->memcpy[kind];
    if (!m->count)
      continue;
    format_bytes(m->bytes, a, sizeof(a));
    fmt_ns(m->gpu_time_ns, b, sizeof(b));
    fd_writer_printf(&fw, "gpuprof:   memcpy %-7s %llu copies, %s, %s\n",
                     aggregate_copy_kind_name(kind), (unsigned long long)m->count, a, b);
  }
  if (t->memset.count) {
    format_bytes(t->memset.bytes, a, sizeof(a));
    fd_writer_printf(&fw, "gpuprof:   memset: %llu sets, %s\n", (unsigned long long)t->memset.count,
                     a);
  }
  for (int i = 0; in->mem && i <= ALLOC_MAX_DEVICES; i++) {
    const struct alloc_device_stats *d = &in->mem->dev[i];
    if (!d->allocs && !d->frees)
      continue;
    format_bytes(d->peak_in_use, a, sizeof(a));
    format_bytes(d->in_use, b, sizeof(b));
    if (i == 0)
      fd_writer_printf(&fw, "gpuprof:   pinned host memory: ");
    else
      fd_writer_printf(&fw, "gpuprof:   memory on device %d: ", i - 1);
    fd_writer_printf(&fw, "%llu allocations, %llu frees, peak %s in use, %s in use at exit\n",
                     (unsigned long long)d->allocs, (unsigned long long)d->frees, a, b);
  }

  if (in->stacks) {
    struct stack_report_input sr = {in->agg,
                                    in->allocs,
                                    in->stacks,
                                    hoststack_policy_name(),
                                    hoststack_sample_every(),
                                    in->cfg->stack_depth};
    stack_report_print(&sr, &fw);
  }
  {
    struct oom_stats st;
    char api[64];

    oom_get_stats(&st);
    if (st.failed && st.have_first) {
      aggregate_api_base_name(st.first.api, api, sizeof(api));
      format_bytes(st.first.bytes, a, sizeof(a));
      if (st.first.device == ALLOC_DEVICE_HOST)
        snprintf(b, sizeof(b), "pinned host memory");
      else
        snprintf(b, sizeof(b), "device %d", (int)st.first.device);
      fd_writer_printf(&fw,
                       "gpuprof:   out of memory: %llu allocations failed (first: %s of %s on "
                       "%s), %llu snapshots written\n",
                       (unsigned long long)st.failed, api, a, b, (unsigned long long)st.snapshots);
    }
  }

  {
    struct nccl_stats ns;
    nccl_get_stats(&ns);
    if (ns.ops)
      fd_writer_printf(&fw,
                       "gpuprof:   NCCL: %llu ops on %llu communicators, %llu joined to their "
                       "kernels, %llu unjoined, %llu dropped (pool full)\n",
                       (unsigned long long)ns.ops, (unsigned long long)ns.comms,
                       (unsigned long long)ns.ops_joined, (unsigned long long)ns.ops_unjoined,
                       (unsigned long long)ns.ops_dropped);
    print_nccl_pending(&fw);
  }
  losses = in->worker.dropped_records + in->worker.zero_timestamps + in->worker.invalid_records +
           t->joins_unknown + (in->mem ? in->mem->unknown_frees : 0) + in->buffer_pool_exhausted +
           in->worker.lost_buffers;
  if (!losses && !in->worker.exit_incomplete)
    fd_writer_printf(&fw, "gpuprof:   losses: none\n");
  else
    fd_writer_printf(
        &fw,
        "gpuprof:   losses: %llu dropped records, %llu without timestamps, %llu invalid, "
        "%llu unknown correlation, %llu unknown frees, %llu buffer requests refused, "
        "%llu buffers unread%s\n",
        (unsigned long long)in->worker.dropped_records,
        (unsigned long long)in->worker.zero_timestamps,
        (unsigned long long)in->worker.invalid_records, (unsigned long long)t->joins_unknown,
        (unsigned long long)(in->mem ? in->mem->unknown_frees : 0),
        (unsigned long long)in->buffer_pool_exhausted, (unsigned long long)in->worker.lost_buffers,
        in->worker.exit_incomplete ? " (incomplete: the exit path gave up waiting on CUPTI)" : "");
  aggregate_unlock(in->agg);
  free(kernels);
out:
  if (written_to)
    fd_writer_printf(&fw, "gpuprof:   summary: %s\n", written_to);
  fd_writer_flush(&fw);
}
