/* Pyroscope requests: labels, the /push protobuf body, /ingest multipart, one libcurl client. */
#include "export/pyroscope.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export/curl_api.h"
#include "export/utf8.h"
#include "proto/push.pb-c.h"

#define PUSH_PATH "/push.v1.PusherService/Push"
#define INGEST_PATH "/ingest"
#define URL_MAX PYROSCOPE_URL_MAX
/* The query after the name, with from/until at their widest (20 digits each). */
#define INGEST_QUERY_REST "&from=18446744073709551615&until=18446744073709551615&spyName=gpuprof"

const char *pyroscope_series_name(const char *kind)
{
  /*
   * Fixed names instead of Pyroscope's guess from the sample types (which would call the
   * GPU-time profile "launches" and the memory profile "memory", mixing it with Go heap
   * profiles): one name per kind, all under a "gpu" prefix so they sort together in the UI.
   */
  static const struct {
    const char *kind, *name;
  } names[] = {
      {"gpu_time", "gpu"},
      {"gpu_memory", "gpu_memory"},
      {"memcpy", "gpu_memcpy"},
      {"nccl", "gpu_nccl"},
  };

  if (!kind)
    return NULL;
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if (!strcmp(kind, names[i].kind))
      return names[i].name;
  return NULL;
}

int pyroscope_label_name_valid(const char *name)
{
  size_t n = name ? strlen(name) : 0;

  if (n == 0 || n > PYROSCOPE_MAX_NAME)
    return 0;
  for (size_t i = 0; i < n; i++) {
    char c = name[i];
    int alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    int digit_dot = (c >= '0' && c <= '9') || c == '.';
    if (!alpha && (i == 0 || !digit_dot))
      return 0;
  }
  return 1;
}

const char *pyroscope_labels_get(const struct pyroscope_labels *ls, const char *name)
{
  for (size_t i = 0; i < ls->n; i++)
    if (!strcmp(ls->l[i].name, name))
      return ls->l[i].value;
  return NULL;
}

/* A Pyroscope that sanitizes label names (validation.disable-label-sanitization=false; the
 * default has differed between releases) turns '.' into '_' and refuses a series where two
 * names then meet with different values. Keeping only the first of such names is harmless
 * where the server does not sanitize. */
static int same_sanitized(const char *a, const char *b)
{
  for (; *a && *b; a++, b++)
    if (*a != *b && !((*a == '.' || *a == '_') && (*b == '.' || *b == '_')))
      return 0;
  return *a == *b;
}

int pyroscope_labels_add(struct pyroscope_labels *ls, const char *name, const char *value)
{
  char *n, *v;

  if (!pyroscope_label_name_valid(name) || !value || strlen(value) > PYROSCOPE_MAX_VALUE)
    return -EINVAL;
  for (size_t i = 0; i < ls->n; i++)
    if (same_sanitized(ls->l[i].name, name))
      return -EEXIST;
  if (ls->n == PYROSCOPE_MAX_LABELS)
    return -E2BIG;
  n = strdup(name);
  v = strdup(value);
  if (!n || !v) {
    free(n);
    free(v);
    return -ENOMEM;
  }
  utf8_fix(v);
  ls->l[ls->n].name = n;
  ls->l[ls->n].value = v;
  ls->n++;
  return 0;
}

void pyroscope_labels_pop(struct pyroscope_labels *ls)
{
  if (!ls->n)
    return;
  ls->n--;
  free(ls->l[ls->n].name);
  free(ls->l[ls->n].value);
}

void pyroscope_labels_clear(struct pyroscope_labels *ls)
{
  for (size_t i = 0; i < ls->n; i++) {
    free(ls->l[i].name);
    free(ls->l[i].value);
  }
  ls->n = 0;
}

int pyroscope_push_body(const struct pyroscope_labels *ls, const uint8_t *profile, size_t len,
                        uint8_t **out, size_t *out_len)
{
  Gpuprof__Push__PushRequest req = GPUPROF__PUSH__PUSH_REQUEST__INIT;
  Gpuprof__Push__Series series = GPUPROF__PUSH__SERIES__INIT;
  Gpuprof__Push__Profile prof = GPUPROF__PUSH__PROFILE__INIT;
  Gpuprof__Push__Label labels[PYROSCOPE_MAX_LABELS];
  Gpuprof__Push__Label *label_ptrs[PYROSCOPE_MAX_LABELS];
  Gpuprof__Push__Series *series_ptr = &series;
  Gpuprof__Push__Profile *prof_ptr = &prof;
  uint8_t *buf;
  size_t size;

  if (!ls->n || !profile || !len)
    return -EINVAL;
  for (size_t i = 0; i < ls->n; i++) {
    gpuprof__push__label__init(&labels[i]);
    labels[i].name = ls->l[i].name;
    labels[i].value = ls->l[i].value;
    label_ptrs[i] = &labels[i];
  }
  /* protobuf-c only reads through these pointers while packing. */
  prof.raw_profile.data = (uint8_t *)(uintptr_t)profile;
  prof.raw_profile.len = len;
  series.labels = label_ptrs;
  series.n_labels = ls->n;
  series.samples = &prof_ptr;
  series.n_samples = 1;
  req.series = &series_ptr;
  req.n_series = 1;

  size = gpuprof__push__push_request__get_packed_size(&req);
  buf = malloc(size ? size : 1);
  if (!buf)
    return -ENOMEM;
  gpuprof__push__push_request__pack(&req, buf);
  *out = buf;
  *out_len = size;
  return 0;
}

static int ingest_app_char(char c)
{
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '.' || c == '-' || c == '/';
}

int pyroscope_ingest_name(const struct pyroscope_labels *ls, char *buf, size_t cap)
{
  const char *app = pyroscope_labels_get(ls, "service_name");
  size_t pos = 0;
  int first = 1, n;

  if (!app || !*app)
    return -EINVAL;
  for (const char *p = app; *p; p++)
    if (!ingest_app_char(*p))
      return -EINVAL;
  n = snprintf(buf, cap, "%s{", app);
  if (n < 0 || (size_t)n >= cap)
    return -ENOSPC;
  pos = (size_t)n;
  for (size_t i = 0; i < ls->n; i++) {
    const char *k = ls->l[i].name, *v = ls->l[i].value;
    if (!strncmp(k, "__", 2) || !strcmp(k, "service_name"))
      continue;
    /* The {k=v,...} syntax has no quoting: these characters would split the value. */
    if (strpbrk(v, ",{}="))
      return -EINVAL;
    n = snprintf(buf + pos, cap - pos, "%s%s=%s", first ? "" : ",", k, v);
    if (n < 0 || (size_t)n >= cap - pos)
      return -ENOSPC;
    pos += (size_t)n;
    first = 0;
  }
  if (pos + 2 > cap)
    return -ENOSPC;
  buf[pos++] = '}';
  buf[pos] = '\0';
  return 0;
}

int pyroscope_ingest_fits(const struct pyroscope_labels *ls, const char *base_url)
{
  char name[PYROSCOPE_INGEST_NAME_MAX];
  size_t base = strlen(base_url), len;
  int ret = pyroscope_ingest_name(ls, name, sizeof(name));

  if (ret)
    return ret;
  while (base && base_url[base - 1] == '/')
    base--;
  /* curl_easy_escape keeps [A-Za-z0-9-._~] and writes every other byte as %XX. */
  len = base + strlen(INGEST_PATH "?name=") + strlen(INGEST_QUERY_REST);
  for (const char *p = name; *p; p++)
    len += ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            *p == '-' || *p == '.' || *p == '_' || *p == '~')
               ? 1
               : 3;
  return len < URL_MAX ? 0 : -ENOSPC;
}

void pyroscope_url_for_log(const char *url, char *out, size_t cap)
{
  const char *scheme = strstr(url, "://");
  const char *auth = scheme ? scheme + 3 : url;
  size_t auth_len = strcspn(auth, "/?#");
  const char *at = NULL, *query;

  if (!cap)
    return;
  for (size_t i = 0; i < auth_len; i++)
    if (auth[i] == '@')
      at = auth + i;
  query = strchr(auth + auth_len, '?');
  if (at)
    snprintf(out, cap, "%.*s***%.*s", (int)(auth - url), url,
             (int)((query ? query : auth + strlen(auth)) - at), at);
  else
    snprintf(out, cap, "%.*s", (int)((query ? query : auth + strlen(auth)) - url), url);
  if (query) {
    size_t n = strlen(out);
    snprintf(out + n, cap - n, "?***");
  }
}

/* ---- the client ---- */

/* Every libcurl call goes through c->curl (export/curl_api.h): this file never names a curl_
 * function directly, so it links into the agent without libcurl. */
struct pyroscope_client {
  const struct curl_api *curl;
  CURL *h;
  struct curl_slist *headers;
  enum pyroscope_api api;
  char base[URL_MAX];
  char errbuf[CURL_ERROR_SIZE];
  char reply[512]; /* the start of the response body: the error message on a 4xx/5xx */
  size_t reply_len;
  int (*should_abort)(void *arg);
  void *abort_arg;
};

/* Keeps the first bytes of the answer (for the log) and discards the rest: never stdout. */
static size_t on_reply(char *data, size_t size, size_t nmemb, void *arg)
{
  struct pyroscope_client *c = arg;
  size_t len = size * nmemb, room = sizeof(c->reply) - 1 - c->reply_len;
  size_t take = len < room ? len : room;

  memcpy(c->reply + c->reply_len, data, take);
  c->reply_len += take;
  c->reply[c->reply_len] = '\0';
  return len;
}

static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
  struct pyroscope_client *c = arg;

  (void)dltotal;
  (void)dlnow;
  (void)ultotal;
  (void)ulnow;
  return c->should_abort && c->should_abort(c->abort_arg) ? 1 : 0;
}

static int append_header(const struct curl_api *curl, struct curl_slist **list, const char *fmt,
                         const char *value)
{
  char line[1024];
  struct curl_slist *n;

  if (snprintf(line, sizeof(line), fmt, value) >= (int)sizeof(line))
    return -EINVAL;
  n = curl->slist_append(*list, line);
  if (!n)
    return -ENOMEM;
  *list = n;
  return 0;
}

void pyroscope_client_free(struct pyroscope_client *c)
{
  if (!c)
    return;
  if (c->h)
    c->curl->easy_cleanup(c->h);
  if (c->headers)
    c->curl->slist_free_all(c->headers);
  free(c);
}

struct pyroscope_client *pyroscope_client_new(const struct pyroscope_client_options *opt)
{
  struct pyroscope_client *c = calloc(1, sizeof(*c));
  size_t n;
  int ret = 0;

  if (!c)
    return NULL;
  c->curl = opt->curl;
  if (!c->curl || !opt->url)
    goto fail;
  n = strlen(opt->url);
  while (n && opt->url[n - 1] == '/')
    n--;
  if (n + sizeof(PUSH_PATH) >= sizeof(c->base))
    goto fail;
  memcpy(c->base, opt->url, n);
  c->base[n] = '\0';
  c->api = opt->api;
  c->should_abort = opt->should_abort;
  c->abort_arg = opt->abort_arg;
  c->h = c->curl->easy_init();
  if (!c->h)
    goto fail;

  if (opt->api == PYROSCOPE_API_PUSH) {
    ret = append_header(c->curl, &c->headers, "%s", "Content-Type: application/proto");
    if (!ret)
      ret = append_header(c->curl, &c->headers, "%s", "Connect-Protocol-Version: 1");
  }
  /* No "Expect: 100-continue" round trip before large bodies. */
  if (!ret)
    ret = append_header(c->curl, &c->headers, "%s", "Expect:");
  if (!ret && opt->tenant && *opt->tenant)
    ret = append_header(c->curl, &c->headers, "X-Scope-OrgID: %s", opt->tenant);
  if (ret)
    goto fail;

  /* Never let libcurl install signal handlers (SIGALRM for DNS timeouts, SIGPIPE) in the
   * host process; with the threaded resolver timeouts still apply to name lookups. */
  c->curl->easy_setopt(c->h, CURLOPT_NOSIGNAL, 1L);
  c->curl->easy_setopt(c->h, CURLOPT_HTTPHEADER, c->headers);
  c->curl->easy_setopt(c->h, CURLOPT_ERRORBUFFER, c->errbuf);
  c->curl->easy_setopt(c->h, CURLOPT_WRITEFUNCTION, on_reply);
  c->curl->easy_setopt(c->h, CURLOPT_WRITEDATA, c);
  c->curl->easy_setopt(c->h, CURLOPT_NOPROGRESS, 0L);
  c->curl->easy_setopt(c->h, CURLOPT_XFERINFOFUNCTION, on_progress);
  c->curl->easy_setopt(c->h, CURLOPT_XFERINFODATA, c);
  c->curl->easy_setopt(c->h, CURLOPT_PROTOCOLS_STR, "http,https");
  c->curl->easy_setopt(c->h, CURLOPT_TCP_KEEPALIVE, 1L);
  if (opt->user_agent)
    c->curl->easy_setopt(c->h, CURLOPT_USERAGENT, opt->user_agent);
  if (opt->user && *opt->user) {
    c->curl->easy_setopt(c->h, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
    c->curl->easy_setopt(c->h, CURLOPT_USERNAME, opt->user);
    c->curl->easy_setopt(c->h, CURLOPT_PASSWORD, opt->password ? opt->password : "");
  }
  return c;
fail:
  pyroscope_client_free(c);
  return NULL;
}

static void set_message(struct pyroscope_result *res, const char *a, const char *b)
{
  size_t n = strlen(a) < sizeof(res->message) - 1 ? strlen(a) : sizeof(res->message) - 1;

  /* Truncation is fine: this is a log line. */
  memcpy(res->message, a, n);
  res->message[n] = '\0';
  if (b)
    strncat(res->message, b, sizeof(res->message) - 1 - n);
  /* One log line: the server's message may span lines. */
  for (char *p = res->message; *p; p++)
    if (*p == '\n' || *p == '\r')
      *p = ' ';
}

int pyroscope_client_send(struct pyroscope_client *c, const struct pyroscope_labels *ls,
                          const uint8_t *profile, size_t len, uint64_t start_ns, uint64_t end_ns,
                          long timeout_ms, struct pyroscope_result *res)
{
  char url[URL_MAX], name[PYROSCOPE_INGEST_NAME_MAX];
  uint8_t *body = NULL;
  size_t body_len = 0;
  curl_mime *mime = NULL;
  char *esc = NULL;
  curl_off_t retry_after = 0;
  CURLcode rc;
  int ret = 0;

  memset(res, 0, sizeof(*res));
  res->outcome = PYROSCOPE_LOCAL_ERR;
  c->errbuf[0] = '\0';
  c->reply[0] = '\0';
  c->reply_len = 0;

  if (c->api == PYROSCOPE_API_PUSH) {
    ret = pyroscope_push_body(ls, profile, len, &body, &body_len);
    if (ret)
      goto out;
    if (snprintf(url, sizeof(url), "%s" PUSH_PATH, c->base) >= (int)sizeof(url)) {
      ret = -EINVAL;
      goto out;
    }
    c->curl->easy_setopt(c->h, CURLOPT_POSTFIELDS, (const char *)body);
    c->curl->easy_setopt(c->h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
  } else {
    curl_mimepart *part;

    ret = pyroscope_ingest_name(ls, name, sizeof(name));
    if (ret)
      goto out;
    esc = c->curl->easy_escape(c->h, name, 0);
    mime = c->curl->mime_init(c->h);
    part = mime ? c->curl->mime_addpart(mime) : NULL;
    if (!esc || !part) {
      ret = -ENOMEM;
      goto out;
    }
    /* from/until in seconds; the pprof's own time_nanos takes precedence on the server. No
     * format= parameter: with it the server would parse the multipart bytes as pprof. */
    if (snprintf(url, sizeof(url), "%s" INGEST_PATH "?name=%s&from=%llu&until=%llu&spyName=gpuprof",
                 c->base, esc, (unsigned long long)(start_ns / 1000000000ull),
                 (unsigned long long)((end_ns + 999999999ull) / 1000000000ull)) >=
        (int)sizeof(url)) {
      ret = -EINVAL;
      goto out;
    }
    /* The filename makes it a file part; Pyroscope ignores a plain form value "profile". */
    if (c->curl->mime_name(part, "profile") || c->curl->mime_filename(part, "profile.pb.gz") ||
        c->curl->mime_data(part, (const char *)profile, len) ||
        c->curl->mime_type(part, "application/octet-stream")) {
      ret = -ENOMEM;
      goto out;
    }
    c->curl->easy_setopt(c->h, CURLOPT_MIMEPOST, mime);
    body_len = len;
  }
  res->body_len = body_len;
  c->curl->easy_setopt(c->h, CURLOPT_URL, url);
  c->curl->easy_setopt(c->h, CURLOPT_TIMEOUT_MS, timeout_ms > 0 ? timeout_ms : 1L);
  c->curl->easy_setopt(c->h, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms > 0 ? timeout_ms : 1L);

  rc = c->curl->easy_perform(c->h);
  if (rc == CURLE_ABORTED_BY_CALLBACK) {
    res->outcome = PYROSCOPE_ABORTED;
    set_message(res, "aborted at the exit deadline", NULL);
  } else if (rc != CURLE_OK) {
    res->outcome = PYROSCOPE_RETRY;
    set_message(res, c->errbuf[0] ? c->errbuf : c->curl->easy_strerror(rc), NULL);
  } else {
    c->curl->easy_getinfo(c->h, CURLINFO_RESPONSE_CODE, &res->status);
    if (c->curl->easy_getinfo(c->h, CURLINFO_RETRY_AFTER, &retry_after) == CURLE_OK &&
        retry_after > 0)
      res->retry_after_s = retry_after > 3600 ? 3600u : (unsigned)retry_after;
    if (res->status >= 200 && res->status < 300)
      res->outcome = PYROSCOPE_SENT;
    else if (res->status == 408 || res->status == 429 || res->status >= 500)
      res->outcome = PYROSCOPE_RETRY;
    else
      res->outcome = PYROSCOPE_REJECTED;
    if (res->outcome != PYROSCOPE_SENT) {
      char status[32];
      snprintf(status, sizeof(status), "HTTP %ld: ", res->status);
      set_message(res, status, c->reply[0] ? c->reply : "(no message)");
    }
  }
out:
  /* The handle outlives this request: drop references to this request's memory. */
  if (c->api == PYROSCOPE_API_PUSH)
    c->curl->easy_setopt(c->h, CURLOPT_POSTFIELDS, NULL);
  else
    c->curl->easy_setopt(c->h, CURLOPT_MIMEPOST, NULL);
  c->curl->mime_free(mime);
  c->curl->free(esc);
  free(body);
  if (ret)
    set_message(res,
                ret == -ENOMEM ? "out of memory building the request"
                               : "cannot build the request from these labels",
                NULL);
  return ret;
}
