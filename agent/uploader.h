/* The Pyroscope uploader: a bounded queue of finished profiles and the thread that pushes them. */
#ifndef GPUPROF_AGENT_UPLOADER_H
#define GPUPROF_AGENT_UPLOADER_H

#include <stddef.h>
#include <stdint.h>

struct config;

/*
 * One uploader per process. Producers (the pprof window code on the worker thread) call
 * uploader_submit, which copies the bytes into the queue and returns at once; the uploader
 * thread sends entries in order with libcurl (docs/PYROSCOPE.md). The network is only ever
 * touched by that thread, so a slow or dead server never stalls capture.
 *
 * Queue policy: at most GPUPROF_UPLOAD_QUEUE entries. When the queue is full, the OLDEST
 * entry is dropped (and counted in `dropped`) to make room, and the new one is queued: the
 * newest windows are the most useful, and the oldest are the first that Pyroscope would
 * reject anyway (timestamps older than 1 h). Transient failures (transport errors, 429,
 * 5xx) keep the entry at the head of the queue and retry it with exponential backoff;
 * other 4xx answers drop it as a permanent failure (`failed`, one log line with the
 * server's message).
 */

/* Starts the thread when cfg->pyroscope_url is set (returns 0 and does nothing otherwise).
 * 0 or -errno; on failure one stderr line, and uploads stay off. Call once. Nothing here
 * touches libcurl: the thread loads it (dlopen, cfg->test_curl_path or libcurl.so.4) and
 * checks the URL with it; when either fails it logs one line, drops what was queued (counted
 * as dropped) and later submissions get -ESHUTDOWN. */
int uploader_start(const struct config *cfg);

/* Queues one encoded profile (gzip pprof) for upload; copies the bytes. Never blocks on the
 * network. A full queue never refuses the new profile: the oldest entry is dropped and counted
 * instead, and the call returns 0 (so -ENOSPC is never returned). Otherwise: -ESHUTDOWN when
 * not running (no URL, not started, or stopped), -EINVAL for an unknown kind or an empty
 * profile, -ENOMEM when the copy cannot be allocated (the profile is counted as dropped).
 * kind is "gpu_time", "gpu_memory" or "memcpy"; the window is CLOCK_REALTIME ns. */
int uploader_submit(const char *kind, const uint8_t *pprof_gz, size_t len, uint64_t window_start_ns,
                    uint64_t window_end_ns);

/*
 * Final flush: keeps sending what is queued until the queue is empty or timeout_ns has
 * passed, then stops the thread (a request still in flight at the deadline is aborted) and
 * counts what was left as dropped. Returns 0, or -ETIMEDOUT when entries were left or the
 * thread had to be abandoned (it is then detached, never waited for). Idempotent; never
 * delays the caller much beyond timeout_ns (libcurl checks the abort about once a second
 * at worst while a transfer is stalled, and the join gives up 2 s after the deadline).
 */
int uploader_stop(uint64_t timeout_ns);

struct uploader_stats {
  uint64_t submitted;  /* profiles given to uploader_submit while running; once stopped,
                          submitted == sent + dropped + failed */
  uint64_t sent;       /* profiles the server accepted (2xx) */
  uint64_t retried;    /* requests repeated after a transient failure */
  uint64_t dropped;    /* never sent: queue full, too old to be accepted, left at the exit
                          deadline, or no memory */
  uint64_t failed;     /* rejected by the server for good (4xx other than 408/429) */
  uint64_t bytes_sent; /* request bodies of the sent profiles */
};

/* A snapshot (exact once the uploader stopped). enabled: whether uploads are configured. */
void uploader_get_stats(struct uploader_stats *out, int *enabled);

/* Forked child: the thread does not exist there; forget it without touching locks. */
void uploader_forget(void);

#endif
