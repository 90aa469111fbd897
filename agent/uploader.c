/* The Pyroscope uploader: a bounded queue of finished profiles and the thread that pushes them. */
#define LOG_MODULE "pyroscope"
#include "agent/uploader.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/config.h"
#include "agent/util/bthread.h"
#include "agent/util/clock.h"
#include "agent/util/guard.h"
#include "agent/util/log.h"
#include "export/curl_api.h"
#include "export/pyroscope.h"
#include "gpuprof/gpuprof.h"

#define N_KINDS 4
#define BACKOFF_MIN_NS (500ull * 1000000ull)
#define BACKOFF_MAX_NS (30ull * 1000000000ull)
/* Pyroscope rejects profiles whose time is older than 1 h (formats.md §2.4): keep a margin. */
#define MAX_AGE_NS (55ull * 60 * 1000000000ull)
/* How long uploader_stop waits for the thread past the deadline before abandoning it: libcurl
 * polls the abort callback about once a second while a transfer is stalled. */
#define JOIN_GRACE_NS (2000ull * 1000000ull)
#define MAX_REJECTION_LOGS 5

static const char *const kinds[N_KINDS] = {"gpu_time", "gpu_memory", "memcpy", "nccl"};

struct entry {
  uint8_t *data;
  size_t len;
  uint64_t start_ns, end_ns;
  unsigned kind;
};

static struct {
  pthread_mutex_t lock;
  pthread_cond_t wake; /* an entry was queued, or stop */
  struct bthread *thread;
  int started; /* the thread exists and was not joined or abandoned */
  int stop;
  _Atomic int accepting;
  _Atomic int enabled;       /* a URL is configured (even if the thread has ended) */
  _Atomic uint64_t deadline; /* CLOCK_MONOTONIC ns of the final flush's end; 0: none yet */
  struct entry *ring;        /* `cap` queued entries, oldest at `head` */
  unsigned cap, head, count;
  /* Read-only after uploader_start. */
  struct pyroscope_labels labels[N_KINDS];
  struct pyroscope_client_options opt;
  char url[CONFIG_PATH_MAX];
  char url_log[CONFIG_PATH_MAX + 8]; /* url without its credentials: what log lines show */
  char curl_path[CONFIG_PATH_MAX];   /* GPUPROF_TEST_CURL_PATH; "": libcurl.so.4 */
  char user_agent[64];
  uint64_t timeout_ns, exit_timeout_ns;
  unsigned left_at_exit; /* entries the thread dropped when it stopped */
} u = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
};

static struct {
  _Atomic uint64_t submitted, sent, retried, dropped, failed, bytes;
} st;

#define ADD(field, n) atomic_fetch_add_explicit(&st.field, (n), memory_order_relaxed)

static int kind_index(const char *kind)
{
  for (unsigned i = 0; kind && i < N_KINDS; i++)
    if (!strcmp(kind, kinds[i]))
      return (int)i;
  return -1;
}

/* libcurl's progress poll: abort a request once the exit deadline has passed. */
static int past_deadline(void *arg)
{
  uint64_t d = atomic_load(&u.deadline);

  (void)arg;
  return d && clock_monotonic_ns() >= d;
}

/* ---- libcurl, loaded on the upload thread ---- */

/*
 * libgpuprof.so does not link libcurl (export/curl_api.h): a process without a Pyroscope URL
 * never maps libcurl or OpenSSL. The upload thread loads it, once, before its first request;
 * written only by that thread before anything reads it through u.opt.curl, and never unloaded
 * (a thread abandoned at exit may still be inside it).
 */
static struct curl_api curl;

static int load_curl(char *why, size_t len)
{
  char err[384];
  int ret = curl_api_load(u.curl_path[0] ? u.curl_path : NULL, &curl, err, sizeof(err));

  if (ret)
    snprintf(why, len,
             "GPUPROF_PYROSCOPE_URL is set but libcurl cannot be loaded (%s): uploads need "
             "libcurl.so.4, from the Debian/Ubuntu package libcurl4",
             err);
  return ret;
}

/* ---- OpenSSL at exit ---- */

/*
 * Workaround: OpenSSL 1.1/3 registers OPENSSL_cleanup with atexit() the first time it is
 * initialized, which here is curl_global_init on the upload thread, i.e. after the agent
 * registered its own exit handler. atexit handlers run in reverse order, so OpenSSL would be
 * torn down before the agent's final flush, and libcurl then crashes inside it (curl_mime_init
 * draws a random boundary: RAND_status on freed locks, even for http://). We therefore make
 * the first initialization ourselves with OPENSSL_INIT_NO_ATEXIT (the first caller decides;
 * when the application initialized OpenSSL before us, its cleanup was registered before our
 * handler and runs after it). As a safety net, OPENSSL_INIT_BASE_ONLY returns 0 once
 * OpenSSL was cleaned up (an application calling OPENSSL_cleanup itself): libcurl is then not
 * touched again. The library is looked up among those already loaded, never loaded: first in
 * the scope of the libcurl we dlopen'ed (RTLD_LOCAL keeps its OpenSSL out of RTLD_DEFAULT),
 * then globally and by soname; a libcurl built on another TLS library simply skips this.
 */
#define OSSL_INIT_BASE_ONLY 0x00040000ull /* OPENSSL_INIT_BASE_ONLY, OpenSSL >= 1.1.0 */
#define OSSL_INIT_NO_ATEXIT 0x00080000ull /* OPENSSL_INIT_NO_ATEXIT, OpenSSL >= 1.1.1b */

typedef int (*ossl_init_fn)(uint64_t opts, const void *settings);
static ossl_init_fn ossl_init;

static void openssl_keep_until_we_exit(void)
{
  static const char *const libs[] = {"libcrypto.so.3", "libcrypto.so.1.1"};
  void *h;

  if (curl.lib)
    ossl_init = (ossl_init_fn)dlsym(curl.lib, "OPENSSL_init_crypto");
  if (!ossl_init)
    ossl_init = (ossl_init_fn)dlsym(RTLD_DEFAULT, "OPENSSL_init_crypto");
  for (size_t i = 0; !ossl_init && i < sizeof(libs) / sizeof(libs[0]); i++) {
    h = dlopen(libs[i], RTLD_LAZY | RTLD_NOLOAD);
    if (h)
      ossl_init = (ossl_init_fn)dlsym(h, "OPENSSL_init_crypto");
    /* The handle only added a reference to a library that stays loaded anyway. */
  }
  if (ossl_init)
    ossl_init(OSSL_INIT_NO_ATEXIT, NULL);
}

static int openssl_alive(void)
{
  return !ossl_init || ossl_init(OSSL_INIT_BASE_ONLY, NULL) == 1;
}

/* ---- labels ---- */

static void add_label(struct pyroscope_labels *ls, const char *name, const char *value,
                      const char *source, int warn, int ingest)
{
  int ret;

  /* /ingest's {k=v,...} has no quoting: such a value would make every request unbuildable. */
  if (ingest && strpbrk(value, ",{}=")) {
    if (warn)
      log_warn("%s: the value of '%s' contains one of , { } = which the /ingest API cannot "
               "carry; leaving it out (GPUPROF_PYROSCOPE_API=push can)",
               source, name);
    return;
  }
  /* On /ingest the server adds pyroscope_spy (from spyName) to the series: one label less. */
  if (ingest && ls->n >= PYROSCOPE_MAX_LABELS - 1)
    ret = -E2BIG;
  else
    ret = pyroscope_labels_add(ls, name, value);
  if (!ret || !warn)
    return;
  if (ret == -EINVAL)
    log_warn("%s: '%s' is not a valid Pyroscope label name ([A-Za-z_][A-Za-z0-9_.]*) or its "
             "value is over 2048 bytes; leaving it out of the uploads",
             source, name);
  else if (ret == -EEXIST)
    log_warn("%s: label '%s' is already set (Pyroscope reads '.' in label names as '_'); "
             "leaving this one out of the uploads",
             source, name);
  else if (ret == -E2BIG)
    log_warn("%s: label '%s' would exceed Pyroscope's %d labels per series%s; leaving it out",
             source, name, PYROSCOPE_MAX_LABELS, ingest ? " (/ingest adds pyroscope_spy)" : "");
}

/* /ingest restricts the application name to [A-Za-z0-9_.-/]: replace anything else. */
static void ingest_safe_name(const char *in, char *out, size_t cap)
{
  size_t i = 0;

  for (; in[i] && i + 1 < cap; i++) {
    char c = in[i];
    int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '_' || c == '.' || c == '-' || c == '/';
    out[i] = ok ? c : '_';
  }
  out[i] = '\0';
}

/*
 * /ingest carries the labels in its URL, which has a length limit (export/pyroscope.h): the
 * labels added last are left out until it fits (the others and every profile still go), once
 * at start, named in one line. __name__, __delta__ and service_name (at most 255 bytes) always
 * fit.
 */
static void fit_ingest(struct pyroscope_labels *ls, int warn)
{
  struct pyroscope_labels fit = *ls; /* shares the strings: only its count changes */
  char left[1024] = "";
  size_t len = 0;

  while (fit.n > 3 && pyroscope_ingest_fits(&fit, u.url) == -ENOSPC)
    fit.n--;
  if (fit.n == ls->n)
    return;
  for (size_t i = fit.n; i < ls->n && len < sizeof(left); i++) {
    int w = snprintf(left + len, sizeof(left) - len, "%s%s", i > fit.n ? ", " : "", ls->l[i].name);
    len += w > 0 ? (size_t)w : 0;
  }
  if (warn)
    log_warn("GPUPROF_PYROSCOPE_API=ingest: the labels (GPUPROF_TAGS, GPUPROF_K8S_*) do not fit "
             "in one /ingest URL of at most %d bytes; leaving out %zu label%s, the last ones: "
             "%s (GPUPROF_PYROSCOPE_API=push has no such limit)",
             PYROSCOPE_URL_MAX, ls->n - fit.n, ls->n - fit.n == 1 ? "" : "s", left);
  while (ls->n > fit.n)
    pyroscope_labels_pop(ls);
}

/*
 * The series labels, the same for every upload of a kind: __name__ (fixed per kind, see
 * pyroscope_series_name), __delta__="false" (each profile holds one window, never a running
 * total; /ingest sets the same), service_name, GPUPROF_TAGS, then the Kubernetes downward-API
 * labels. No pid or hostname: each would multiply the series count (Pyroscope's default limit
 * is 5000 per tenant) with every restart; the pod label already identifies the workload.
 * Warnings are issued once, for the first kind.
 */
static int build_labels(const struct config *cfg)
{
  char app[256];
  int ingest = cfg->pyroscope_api == 1;

  for (unsigned k = 0; k < N_KINDS; k++) {
    struct pyroscope_labels *ls = &u.labels[k];
    int warn = k == 0;

    if (pyroscope_labels_add(ls, "__name__", pyroscope_series_name(kinds[k])) ||
        pyroscope_labels_add(ls, "__delta__", "false"))
      return -ENOMEM;
    if (cfg->pyroscope_api == 1)
      ingest_safe_name(cfg->app_name[0] ? cfg->app_name : "gpuprof", app, sizeof(app));
    else
      snprintf(app, sizeof(app), "%s", cfg->app_name[0] ? cfg->app_name : "gpuprof");
    if (pyroscope_labels_add(ls, "service_name", app))
      return -ENOMEM;
    for (size_t i = 0; i < cfg->n_tags; i++) {
      const char *key = cfg->tags[i].key, *value = cfg->tags[i].value;
      if (!strncmp(key, "__", 2)) {
        if (warn)
          log_warn("GPUPROF_TAGS: label names starting with '__' are reserved by Pyroscope; "
                   "leaving '%s' out of the uploads",
                   key);
        continue;
      }
      add_label(ls, key, value, "GPUPROF_TAGS", warn, ingest);
    }
    if (cfg->k8s_pod[0])
      add_label(ls, "pod", cfg->k8s_pod, "GPUPROF_K8S_POD", warn, ingest);
    if (cfg->k8s_namespace[0])
      add_label(ls, "namespace", cfg->k8s_namespace, "GPUPROF_K8S_NAMESPACE", warn, ingest);
    if (cfg->k8s_node[0])
      add_label(ls, "node", cfg->k8s_node, "GPUPROF_K8S_NODE", warn, ingest);
    if (ingest)
      fit_ingest(ls, warn);
  }
  return 0;
}

/* ---- the thread ---- */

static uint64_t next_backoff(uint64_t prev, unsigned retry_after_s, uint64_t *rng)
{
  uint64_t b = prev ? prev * 2 : BACKOFF_MIN_NS, jitter;

  if (b > BACKOFF_MAX_NS)
    b = BACKOFF_MAX_NS;
  /* A server that says when to come back is believed, within the maximum. */
  if (retry_after_s && (uint64_t)retry_after_s * 1000000000ull > b)
    b = (uint64_t)retry_after_s * 1000000000ull < BACKOFF_MAX_NS
            ? (uint64_t)retry_after_s * 1000000000ull
            : BACKOFF_MAX_NS;
  /* Up to +25%, so that many processes restarted together do not retry in lockstep. */
  *rng ^= *rng << 13;
  *rng ^= *rng >> 7;
  *rng ^= *rng << 17;
  jitter = (*rng % 1000) * (b / 4) / 1000;
  return b + jitter;
}

/* Drops every queued entry (and cur), counting them. Caller holds the lock. */
static unsigned drop_all_locked(struct entry *cur)
{
  unsigned n = 0;

  if (cur && cur->data) {
    free(cur->data);
    cur->data = NULL;
    n++;
  }
  while (u.count) {
    free(u.ring[u.head].data);
    u.head = (u.head + 1) % u.cap;
    u.count--;
    n++;
  }
  ADD(dropped, n);
  return n;
}

static int check_url(const char *url, char *why, size_t len);

static void *uploader_main(void *arg)
{
  struct pyroscope_client_options opt = u.opt;
  struct pyroscope_client *client = NULL;
  struct entry cur = {0};
  uint64_t backoff = 0, next_try = 0, rng = clock_monotonic_ns() ^ (uint64_t)getpid() << 32;
  unsigned failures = 0, rejections = 0, left;
  char why[CONFIG_PATH_MAX + 512]; /* may quote the URL */
  int ret;

  (void)arg;
  guard_hold();
  /* Stopped before it ran, with nothing to send (the agent went inactive right after
   * starting us): libcurl is not worth loading. */
  pthread_mutex_lock(&u.lock);
  ret = u.stop && !u.count;
  pthread_mutex_unlock(&u.lock);
  if (ret)
    return NULL;
  /* Loaded here, not in uploader_start: the application's thread (inside cuInit) never waits
   * for the loader to map libcurl and its dependencies. */
  if (load_curl(why, sizeof(why)))
    goto disable;
  /*
   * curl_global_init here, not in the application's thread inside cuInit: it initializes
   * OpenSSL and friends, which costs milliseconds we need not add to the application's start.
   * It is documented as thread-safe only when curl_version_info() has the
   * CURL_VERSION_THREADSAFE feature (libcurl >= 7.84 built with atomics; Debian 12's has);
   * with an older libcurl an application thread calling it at the same moment could race
   * with us, so that case is only logged at debug level: it is the same race any library
   * using libcurl has, and the window is the first milliseconds of this thread.
   */
  openssl_keep_until_we_exit();
  if (curl.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
    snprintf(why, sizeof(why), "libcurl cannot initialize");
    goto disable;
  }
  if (!(curl.version_info(CURLVERSION_NOW)->features & CURL_VERSION_THREADSAFE))
    log_debug("libcurl %s does not promise a thread-safe curl_global_init",
              curl.version_info(CURLVERSION_NOW)->version);
  /* A bad URL is a configuration error, reported once here rather than per upload. */
  ret = check_url(u.url, why, sizeof(why));
  if (ret)
    goto disable;
  opt.curl = &curl;
  client = pyroscope_client_new(&opt);
  if (!client) {
    snprintf(why, sizeof(why), "cannot create a libcurl handle (out of memory?)");
    goto disable;
  }

  pthread_mutex_lock(&u.lock);
  for (;;) {
    struct pyroscope_result res;
    uint64_t now = 0, timeout_ns, d = 0;

    while (!cur.data && !u.count && !u.stop)
      pthread_cond_wait(&u.wake, &u.lock);
    if (!cur.data && u.count) {
      cur = u.ring[u.head];
      u.head = (u.head + 1) % u.cap;
      u.count--;
    }
    if (!cur.data)
      break; /* stopping with nothing left */
    /* Backing off after a failure: wait, but not past the exit deadline. */
    for (;;) {
      now = clock_monotonic_ns();
      d = atomic_load(&u.deadline);
      if (now >= next_try || (d && now >= d))
        break;
      struct timespec ts = clock_ns_to_timespec(d && d < next_try ? d : next_try);
      pthread_cond_timedwait(&u.wake, &u.lock, &ts);
    }
    if (d && now >= d)
      break;
    pthread_mutex_unlock(&u.lock);

    if (clock_realtime_ns() > cur.start_ns + MAX_AGE_NS) {
      /* Pyroscope would answer 400 for a profile this old: not worth the bandwidth. */
      log_info("dropping a %s profile from %llu s ago: too old for Pyroscope", kinds[cur.kind],
               (unsigned long long)((clock_realtime_ns() - cur.start_ns) / 1000000000ull));
      ADD(dropped, 1);
      free(cur.data);
      cur.data = NULL;
      pthread_mutex_lock(&u.lock);
      continue;
    }
    if (!openssl_alive()) {
      log_warn_once("OpenSSL was shut down by the application; no more Pyroscope uploads");
      pthread_mutex_lock(&u.lock);
      break;
    }
    timeout_ns = u.timeout_ns;
    if (d && d - now < timeout_ns)
      timeout_ns = d - now;
    pyroscope_client_send(client, &u.labels[cur.kind], cur.data, cur.len, cur.start_ns, cur.end_ns,
                          (long)((timeout_ns + 999999) / 1000000), &res);

    switch (res.outcome) {
    case PYROSCOPE_SENT:
      ADD(sent, 1);
      ADD(bytes, res.body_len);
      if (failures)
        log_info("Pyroscope at %s accepts uploads again (after %u failed attempts)", u.url_log,
                 failures);
      failures = 0;
      backoff = next_try = 0;
      free(cur.data);
      cur.data = NULL;
      break;
    case PYROSCOPE_RETRY:
      ADD(retried, 1);
      /* Once per outage: an unreachable server is one line, not one per window. */
      if (failures++ == 0)
        log_warn("cannot upload to Pyroscope at %s: %s; retrying with backoff (up to %u "
                 "profiles wait, the oldest are dropped beyond that)",
                 u.url_log, res.message, u.cap);
      backoff = next_backoff(backoff, res.retry_after_s, &rng);
      next_try = clock_monotonic_ns() + backoff;
      break;
    case PYROSCOPE_REJECTED:
      ADD(failed, 1);
      if (rejections++ < MAX_REJECTION_LOGS)
        log_warn("Pyroscope at %s rejected a %s profile for good: %s%s", u.url_log, kinds[cur.kind],
                 res.message,
                 rejections == MAX_REJECTION_LOGS ? " (further rejections are only counted)" : "");
      failures = 0;
      backoff = next_try = 0;
      free(cur.data);
      cur.data = NULL;
      break;
    case PYROSCOPE_ABORTED:
      break;
    case PYROSCOPE_LOCAL_ERR:
      log_warn_once("cannot build a Pyroscope request: %s; dropping the profile", res.message);
      ADD(dropped, 1);
      free(cur.data);
      cur.data = NULL;
      break;
    }
    pthread_mutex_lock(&u.lock);
    if (res.outcome == PYROSCOPE_ABORTED)
      break;
  }
  /* Stopping at (or past) the deadline: what is left is dropped and counted. */
  atomic_store(&u.accepting, 0);
  left = drop_all_locked(&cur);
  u.left_at_exit = left;
  pthread_mutex_unlock(&u.lock);
  if (left)
    log_warn("%u profile(s) not uploaded to Pyroscope at %s by the exit deadline "
             "(GPUPROF_EXIT_TIMEOUT=%llums); dropped",
             left, u.url_log, (unsigned long long)(u.exit_timeout_ns / 1000000ull));
  pyroscope_client_free(client);
  return NULL;

disable:
  log_warn("%s; Pyroscope uploads are off", why);
  pthread_mutex_lock(&u.lock);
  atomic_store(&u.accepting, 0);
  drop_all_locked(NULL);
  pthread_mutex_unlock(&u.lock);
  return NULL;
}

/* ---- interface ---- */

/* On the upload thread, with libcurl loaded: why is the complete message on failure. */
static int check_url(const char *url, char *why, size_t len)
{
  CURLU *h = curl.url();
  char *host = NULL, *scheme = NULL, *query = NULL, *fragment = NULL;
  const char *bad = NULL;
  int ret = 0;

  if (!h) {
    snprintf(why, len, "GPUPROF_PYROSCOPE_URL='%s' is not checkable (out of memory)", u.url_log);
    return -ENOMEM;
  }
  if (curl.url_set(h, CURLUPART_URL, url, 0) != CURLUE_OK ||
      curl.url_get(h, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
      curl.url_get(h, CURLUPART_HOST, &host, 0) != CURLUE_OK || !host[0])
    bad = "not a URL libcurl can parse";
  else if (strcmp(scheme, "http") && strcmp(scheme, "https"))
    bad = "not an http:// or https:// URL";
  /* The API paths are appended to the URL: after a query they would become part of it. */
  else if (curl.url_get(h, CURLUPART_QUERY, &query, 0) == CURLUE_OK ||
           curl.url_get(h, CURLUPART_FRAGMENT, &fragment, 0) == CURLUE_OK)
    bad = "a URL with a query or fragment; give the server's base URL (e.g. "
          "http://pyroscope:4040 or https://host/prefix)";
  if (bad) {
    snprintf(why, len, "GPUPROF_PYROSCOPE_URL='%s' is %s", u.url_log, bad);
    ret = -EINVAL;
  }
  curl.free(host);
  curl.free(scheme);
  curl.free(query);
  curl.free(fragment);
  curl.url_cleanup(h);
  return ret;
}

int uploader_start(const struct config *cfg)
{
  int ret;

  if (!cfg->pyroscope_url[0])
    return 0;
  snprintf(u.url, sizeof(u.url), "%s", cfg->pyroscope_url);
  pyroscope_url_for_log(u.url, u.url_log, sizeof(u.url_log));
  snprintf(u.curl_path, sizeof(u.curl_path), "%s", cfg->test_curl_path);
  u.cap = (unsigned)cfg->upload_queue;
  u.ring = calloc(u.cap, sizeof(*u.ring));
  ret = u.ring ? build_labels(cfg) : -ENOMEM;
  if (ret)
    goto out;
  snprintf(u.user_agent, sizeof(u.user_agent), "gpuprof/%s", GPUPROF_VERSION_STRING);
  u.opt = (struct pyroscope_client_options){
      .url = u.url,
      .api = cfg->pyroscope_api == 1 ? PYROSCOPE_API_INGEST : PYROSCOPE_API_PUSH,
      .user = cfg->pyroscope_user[0] ? cfg->pyroscope_user : NULL,
      .password = cfg->pyroscope_password,
      .tenant = cfg->pyroscope_tenant[0] ? cfg->pyroscope_tenant : NULL,
      .user_agent = u.user_agent,
      .should_abort = past_deadline,
  };
  u.timeout_ns = cfg->upload_timeout_ns;
  u.exit_timeout_ns = cfg->exit_timeout_ns;
  /* A window is uploaded after its end, stamped with its start: past MAX_AGE_NS every one of
   * them would be dropped unsent (Pyroscope refuses them), which only the counters would say. */
  if (cfg->mode == CONFIG_MODE_CONTINUOUS &&
      cfg->window_ns + 2 * cfg->flush_interval_ns + cfg->upload_timeout_ns > MAX_AGE_NS)
    log_warn("GPUPROF_WINDOW=%llus is too long for Pyroscope, which refuses profiles older "
             "than 1 h: windows will not be uploaded (use 30m or less)",
             (unsigned long long)(cfg->window_ns / 1000000000ull));
  {
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&u.wake, &attr);
    pthread_condattr_destroy(&attr);
  }
  atomic_store(&u.accepting, 1);
  atomic_store(&u.enabled, 1);
  ret = bthread_start(&u.thread, "gpuprof-upload", uploader_main, NULL);
  if (ret) {
    atomic_store(&u.accepting, 0);
    goto out;
  }
  u.started = 1;
  log_debug("uploading profiles to %s (%s API)", u.url_log,
            cfg->pyroscope_api == 1 ? "/ingest" : "/push");
out:
  if (ret) {
    log_warn("cannot start the Pyroscope uploader: %s; uploads to %s are off", strerror(-ret),
             u.url_log);
    for (unsigned k = 0; k < N_KINDS; k++)
      pyroscope_labels_clear(&u.labels[k]);
    free(u.ring);
    u.ring = NULL;
  }
  return ret;
}

int uploader_submit(const char *kind, const uint8_t *pprof_gz, size_t len, uint64_t window_start_ns,
                    uint64_t window_end_ns)
{
  int k = kind_index(kind);
  uint8_t *copy, *evicted = NULL;
  int ret = 0;

  if (!atomic_load_explicit(&u.accepting, memory_order_acquire))
    return -ESHUTDOWN;
  if (k < 0 || !pprof_gz || !len)
    return -EINVAL;
  /* Copied outside the lock: the uploader thread only holds it for queue operations. */
  copy = malloc(len);
  if (!copy) {
    ADD(submitted, 1);
    ADD(dropped, 1);
    return -ENOMEM;
  }
  memcpy(copy, pprof_gz, len);

  pthread_mutex_lock(&u.lock);
  if (!atomic_load(&u.accepting)) {
    ret = -ESHUTDOWN;
  } else {
    if (u.count == u.cap) {
      evicted = u.ring[u.head].data;
      u.head = (u.head + 1) % u.cap;
      u.count--;
      ADD(dropped, 1);
    }
    u.ring[(u.head + u.count) % u.cap] =
        (struct entry){copy, len, window_start_ns, window_end_ns, (unsigned)k};
    u.count++;
    ADD(submitted, 1);
    copy = NULL;
    pthread_cond_signal(&u.wake);
  }
  pthread_mutex_unlock(&u.lock);
  free(copy);
  free(evicted);
  return ret;
}

int uploader_stop(uint64_t timeout_ns)
{
  struct bthread *t;
  int left;

  pthread_mutex_lock(&u.lock);
  if (!u.started) {
    pthread_mutex_unlock(&u.lock);
    return 0;
  }
  u.started = 0;
  u.stop = 1;
  atomic_store(&u.accepting, 0);
  /* Never 0: 0 means "no deadline" to the thread. */
  atomic_store(&u.deadline, clock_monotonic_ns() + timeout_ns + 1);
  t = u.thread;
  u.thread = NULL;
  pthread_cond_signal(&u.wake);
  pthread_mutex_unlock(&u.lock);

  /* On the monotonic clock, like the thread's own deadline: a wall-clock step at exit must
   * neither hang the exit nor abandon an upload that is on time. */
  if (bthread_join_within(t, timeout_ns + JOIN_GRACE_NS)) {
    /* Better profiles lost than an application that cannot exit. The thread keeps its
     * memory (nothing is freed here) and dies with the process. */
    log_warn("the Pyroscope upload thread did not finish %llu ms after the exit deadline; "
             "leaving it behind",
             (unsigned long long)(JOIN_GRACE_NS / 1000000ull));
    return -ETIMEDOUT;
  }
  left = u.left_at_exit != 0;
  for (unsigned k = 0; k < N_KINDS; k++)
    pyroscope_labels_clear(&u.labels[k]);
  free(u.ring);
  u.ring = NULL;
  return left ? -ETIMEDOUT : 0;
}

void uploader_get_stats(struct uploader_stats *out, int *enabled)
{
  out->submitted = atomic_load(&st.submitted);
  out->sent = atomic_load(&st.sent);
  out->retried = atomic_load(&st.retried);
  out->dropped = atomic_load(&st.dropped);
  out->failed = atomic_load(&st.failed);
  out->bytes_sent = atomic_load(&st.bytes);
  if (enabled)
    *enabled = atomic_load(&u.enabled);
}

void uploader_forget(void)
{
  /* In a forked child the thread does not exist and the mutex may be held by it: never lock.
   * The child uploads nothing (its agent is dormant). */
  u.started = 0;
  atomic_store(&u.accepting, 0);
}
