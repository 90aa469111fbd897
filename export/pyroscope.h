/* Pyroscope requests: labels, the /push protobuf body, /ingest multipart, one libcurl client. */
#ifndef GPUPROF_EXPORT_PYROSCOPE_H
#define GPUPROF_EXPORT_PYROSCOPE_H

#include <stddef.h>
#include <stdint.h>

/*
 * Shared by the agent (agent/uploader.c) and the gpuprof command: nothing here knows about
 * the agent. Rules applied are Pyroscope's (formats.md §2): label names in the Prometheus
 * charset, at most PYROSCOPE_MAX_LABELS per series, __name__ and service_name always sent.
 */

enum pyroscope_api {
  PYROSCOPE_API_PUSH = 0, /* POST {url}/push.v1.PusherService/Push, application/proto */
  PYROSCOPE_API_INGEST,   /* POST {url}/ingest?name=app{k=v}, multipart file part "profile" */
};

#define PYROSCOPE_MAX_LABELS 30 /* Pyroscope's max-label-names-per-series default */
#define PYROSCOPE_MAX_NAME 1024
#define PYROSCOPE_MAX_VALUE 2048

struct pyroscope_label {
  char *name;
  char *value;
};

/* A label set, copied. Fixed capacity; labels keep the order they were added in. */
struct pyroscope_labels {
  struct pyroscope_label l[PYROSCOPE_MAX_LABELS];
  size_t n;
};

/* The series name (Pyroscope __name__) for a profile kind, or NULL for an unknown kind:
 * gpu_time -> "gpu", gpu_memory -> "gpu_memory", memcpy -> "gpu_memcpy". */
const char *pyroscope_series_name(const char *kind);

/* 1 when name is a label name Pyroscope accepts: [A-Za-z_][A-Za-z0-9_.]*, at most 1024. */
int pyroscope_label_name_valid(const char *name);

/*
 * Adds a copy of name=value; in the copy every byte of the value that is not part of valid
 * UTF-8 is replaced by '?' (Pyroscope refuses a request with a label that is not UTF-8).
 * -EINVAL: invalid name or value over 2048 bytes; -EEXIST: the name, or one that differs only
 * in '.' for '_' (the same label once Pyroscope sanitizes names), is already in the set (the
 * first one wins); -E2BIG: the set is full; -ENOMEM.
 */
int pyroscope_labels_add(struct pyroscope_labels *ls, const char *name, const char *value);
const char *pyroscope_labels_get(const struct pyroscope_labels *ls, const char *name);
void pyroscope_labels_clear(struct pyroscope_labels *ls);

/* The serialized PushRequest: one series with these labels and one raw profile. *out is
 * malloc'ed (free it). 0, -ENOMEM or -EINVAL. */
int pyroscope_push_body(const struct pyroscope_labels *ls, const uint8_t *profile, size_t len,
                        uint8_t **out, size_t *out_len);

/* /ingest's name parameter, "service{k=v,...}" (not URL-escaped), from the labels: the
 * service_name label is the application name, names starting with "__" are left out (the
 * server sets them). -EINVAL when a value contains ',' '}' '{' or '=' (the format has no
 * quoting) or the application name a character outside [A-Za-z0-9_.-/]; -ENOSPC. */
int pyroscope_ingest_name(const struct pyroscope_labels *ls, char *buf, size_t cap);

/*
 * What an /ingest request can carry: the name parameter in PYROSCOPE_INGEST_NAME_MAX bytes and
 * the whole request URL (the name URL-escaped) in PYROSCOPE_URL_MAX, which is also what
 * common proxies accept in a request line (nginx: 8 KiB).
 */
#define PYROSCOPE_INGEST_NAME_MAX 4096
#define PYROSCOPE_URL_MAX 8192

/*
 * 0 when /ingest requests with these labels to base_url fit those limits (from/until counted
 * at their widest); -ENOSPC when they do not, -EINVAL when the name cannot be built at all
 * (pyroscope_ingest_name). Checked once at start: pyroscope_client_send fails every request
 * whose labels do not fit.
 */
int pyroscope_ingest_fits(const struct pyroscope_labels *ls, const char *base_url);

/* Removes (and frees) the label added last; nothing when the set is empty. */
void pyroscope_labels_pop(struct pyroscope_labels *ls);

/* The URL as it may be logged: credentials in it ("user:password@", which libcurl uses for
 * basic auth) become "***@" and a query becomes "?***" (it may hold a token). Never fails;
 * out is truncated to cap. */
void pyroscope_url_for_log(const char *url, char *out, size_t cap);

struct curl_api; /* export/curl_api.h */

struct pyroscope_client_options {
  /* The libcurl to use: curl_api_load()'s table in the agent, curl_api_linked() in a program
   * linked with libcurl. Must outlive the client; global_init must have been called. */
  const struct curl_api *curl;
  const char *url; /* base URL, e.g. http://pyroscope:4040 (a trailing '/' is ignored) */
  enum pyroscope_api api;
  const char *user;     /* basic auth, or NULL */
  const char *password; /* with user */
  const char *tenant;   /* X-Scope-OrgID, or NULL */
  const char *user_agent;
  /* Polled while a request runs (at least once a second): non-zero aborts it. May be NULL. */
  int (*should_abort)(void *arg);
  void *abort_arg;
};

/* What became of one request. */
enum pyroscope_outcome {
  PYROSCOPE_SENT = 0,  /* 2xx */
  PYROSCOPE_RETRY,     /* transport error, timeout, 408, 429 or 5xx: try again later */
  PYROSCOPE_REJECTED,  /* any other status: the server will never take this profile */
  PYROSCOPE_ABORTED,   /* should_abort said so */
  PYROSCOPE_LOCAL_ERR, /* could not even build the request (no memory, bad labels) */
};

struct pyroscope_result {
  enum pyroscope_outcome outcome;
  long status;            /* HTTP status, 0 when none was received */
  unsigned retry_after_s; /* the server's Retry-After, 0 when absent */
  size_t body_len;        /* request body size */
  char message[512];      /* transport error, or the start of the server's error body */
};

struct pyroscope_client;

/* NULL on failure (no memory, no opt->curl, or libcurl cannot make a handle). */
struct pyroscope_client *pyroscope_client_new(const struct pyroscope_client_options *opt);
void pyroscope_client_free(struct pyroscope_client *c);

/*
 * Sends one gzip pprof under the labels (which must hold __name__ and service_name for
 * /push); window in CLOCK_REALTIME ns (/ingest's from/until). timeout_ms bounds the whole
 * request. Blocking; nothing is printed. Returns 0 and fills *res, or -ENOMEM/-EINVAL with
 * res->outcome = PYROSCOPE_LOCAL_ERR.
 */
int pyroscope_client_send(struct pyroscope_client *c, const struct pyroscope_labels *ls,
                          const uint8_t *profile, size_t len, uint64_t start_ns, uint64_t end_ns,
                          long timeout_ms, struct pyroscope_result *res);

#endif
