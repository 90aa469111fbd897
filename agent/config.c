/* The agent's configuration: every GPUPROF_* environment variable, read once at init. */
#include "agent/config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "export/pyroscope.h"

extern char **environ;

/* Every variable this version reads; anything else with the prefix is reported as unknown. */
static const char *const known_vars[] = {
    "GPUPROF_MODE",
    "GPUPROF_OUTPUT_DIR",
    "GPUPROF_LOG",
    "GPUPROF_WINDOW",
    "GPUPROF_STACKS",
    "GPUPROF_CAPTURE_ON_START",
    "GPUPROF_GPU_ONLY",
    "GPUPROF_NVTX",
    "GPUPROF_TRACE_FORMAT",
    "GPUPROF_RUN_DIR",
    "GPUPROF_PYROSCOPE_URL",
    "GPUPROF_APP_NAME",
    "GPUPROF_TAGS",
    "GPUPROF_PYROSCOPE_API",
    "GPUPROF_PYROSCOPE_USER",
    "GPUPROF_PYROSCOPE_PASSWORD",
    "GPUPROF_PYROSCOPE_PASSWORD_FILE",
    "GPUPROF_PYROSCOPE_TENANT",
    "GPUPROF_UPLOAD_TIMEOUT",
    "GPUPROF_UPLOAD_QUEUE",
    "GPUPROF_PYROSCOPE_MAX_SAMPLES",
    "GPUPROF_PYROSCOPE_MAX_SIZE",
    "GPUPROF_EXIT_TIMEOUT",
    "GPUPROF_K8S_POD",
    "GPUPROF_K8S_NAMESPACE",
    "GPUPROF_K8S_NODE",
    "GPUPROF_CUPTI_PATH",
    "GPUPROF_TEST_CUPTI_WHEELS_ONLY",
    "GPUPROF_TEST_CURL_PATH",
    "GPUPROF_SUMMARY_FILE",
    "GPUPROF_BUFFER_SIZE",
    "GPUPROF_BUFFER_LIMIT",
    "GPUPROF_FLUSH_INTERVAL",
    "GPUPROF_CORR_TABLE_SIZE",
    "GPUPROF_STACK_DEPTH",
    "GPUPROF_STACK_SAMPLE_EVERY",
    "GPUPROF_STACK_SAMPLE_SEED",
    "GPUPROF_STACK_TABLE_SIZE",
    "GPUPROF_STACK_PYTHON",
    "GPUPROF_STACK_UNWIND",
    "GPUPROF_PROFILE_FILES",
    "GPUPROF_TRACE_MAX_SIZE",
    "GPUPROF_CAPTURE_SIGNAL",
    "GPUPROF_OOM_INTERVAL",
    /* Read by the `gpuprof` command (cli/), whose `run` passes its environment on. */
    "GPUPROF_AGENT",
};

#define N_KNOWN (sizeof(known_vars) / sizeof(known_vars[0]))

const char *config_mode_name(enum config_mode mode)
{
  switch (mode) {
  case CONFIG_MODE_CONTINUOUS:
    return "continuous";
  case CONFIG_MODE_ONDEMAND:
    return "ondemand";
  case CONFIG_MODE_OFF:
    return "off";
  }
  return "?";
}

void config_defaults(struct config *cfg)
{
  memset(cfg, 0, sizeof(*cfg));
  cfg->mode = CONFIG_MODE_CONTINUOUS;
  snprintf(cfg->output_dir, sizeof(cfg->output_dir), "%s", CONFIG_DEFAULT_OUTPUT_DIR);
  cfg->log_level = LOG_WARN;
  cfg->window_ns = CONFIG_DEFAULT_WINDOW_NS;
  cfg->stacks = CONFIG_STACKS_SAMPLED;
  cfg->trace_format = CONFIG_TRACE_JSON_GZ;
  cfg->nvtx = 1;
  snprintf(cfg->run_dir, sizeof(cfg->run_dir), "%s", CONFIG_DEFAULT_OUTPUT_DIR "/run");
  snprintf(cfg->app_name, sizeof(cfg->app_name), "%s", program_invocation_short_name);
  cfg->buffer_size = CONFIG_DEFAULT_BUFFER_SIZE;
  cfg->buffer_limit = CONFIG_DEFAULT_BUFFER_LIMIT;
  cfg->flush_interval_ns = CONFIG_DEFAULT_FLUSH_INTERVAL_NS;
  cfg->corr_table_size = CONFIG_DEFAULT_CORR_TABLE_SIZE;
  cfg->upload_timeout_ns = CONFIG_DEFAULT_UPLOAD_TIMEOUT_NS;
  cfg->upload_queue = CONFIG_DEFAULT_UPLOAD_QUEUE;
  cfg->pyroscope_max_samples = CONFIG_DEFAULT_PYROSCOPE_MAX_SAMPLES;
  cfg->pyroscope_max_size = CONFIG_DEFAULT_PYROSCOPE_MAX_SIZE;
  cfg->exit_timeout_ns = CONFIG_DEFAULT_EXIT_TIMEOUT_NS;
  cfg->stack_depth = CONFIG_DEFAULT_STACK_DEPTH;
  cfg->trace_max_size = CONFIG_DEFAULT_TRACE_MAX_SIZE;
  cfg->stack_sample_every = CONFIG_DEFAULT_STACK_SAMPLE_EVERY;
  cfg->stack_table_size = CONFIG_DEFAULT_STACK_TABLE_SIZE;
  cfg->stack_python = 1;
  cfg->profile_files = 1;
  cfg->oom_interval_ns = CONFIG_DEFAULT_OOM_INTERVAL_NS;
}

/* ---- parsers ---- */

/* Parses the leading unsigned decimal integer; *end points after it. */
static int parse_u64(const char *s, uint64_t *v, const char **end)
{
  uint64_t x = 0;
  const char *p = s;

  if (*p < '0' || *p > '9')
    return -EINVAL;
  for (; *p >= '0' && *p <= '9'; p++) {
    uint64_t d = (uint64_t)(*p - '0');
    if (x > (UINT64_MAX - d) / 10)
      return -EINVAL;
    x = x * 10 + d;
  }
  *v = x;
  *end = p;
  return 0;
}

static int mul_check(uint64_t a, uint64_t b, uint64_t *out)
{
  if (b && a > UINT64_MAX / b)
    return -EINVAL;
  *out = a * b;
  return 0;
}

/* "15s", "500ms", "2m", "1h", "100us", "10ns"; a bare number means seconds. */
int config_parse_duration(const char *s, uint64_t *ns)
{
  static const struct {
    const char *suffix;
    uint64_t mult;
  } units[] = {
      {"ns", 1ull},        {"us", 1000ull},       {"ms", 1000000ull},      {"s", 1000000000ull},
      {"", 1000000000ull}, {"m", 60000000000ull}, {"min", 60000000000ull}, {"h", 3600000000000ull},
  };
  const char *end;
  uint64_t v;

  if (!s || parse_u64(s, &v, &end))
    return -EINVAL;
  for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
    if (!strcmp(end, units[i].suffix))
      return mul_check(v, units[i].mult, ns);
  return -EINVAL;
}

/* "4194304", "4096K", "4M", "1G", "1T" (binary multiples; "KB"/"KiB" spellings accepted; T
 * because GPUPROF_TRACE_MAX_SIZE's documented maximum is 1T). */
int config_parse_size(const char *s, uint64_t *bytes)
{
  static const struct {
    const char *suffix;
    uint64_t mult;
  } units[] = {
      {"", 1ull},          {"B", 1ull},         {"K", 1ull << 10},   {"KB", 1ull << 10},
      {"KiB", 1ull << 10}, {"M", 1ull << 20},   {"MB", 1ull << 20},  {"MiB", 1ull << 20},
      {"G", 1ull << 30},   {"GB", 1ull << 30},  {"GiB", 1ull << 30}, {"T", 1ull << 40},
      {"TB", 1ull << 40},  {"TiB", 1ull << 40},
  };
  const char *end;
  uint64_t v;

  if (!s || parse_u64(s, &v, &end))
    return -EINVAL;
  for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
    if (!strcasecmp(end, units[i].suffix))
      return mul_check(v, units[i].mult, bytes);
  return -EINVAL;
}

int config_parse_bool(const char *s, int *v)
{
  static const char *const yes[] = {"1", "true", "yes", "on"};
  static const char *const no[] = {"0", "false", "no", "off"};

  if (!s)
    return -EINVAL;
  for (size_t i = 0; i < 4; i++) {
    if (!strcasecmp(s, yes[i])) {
      *v = 1;
      return 0;
    }
    if (!strcasecmp(s, no[i])) {
      *v = 0;
      return 0;
    }
  }
  return -EINVAL;
}

/*
 * Only signals with no default meaning an application relies on: SIGUSR1, SIGUSR2 and the
 * real-time ones. Their default action terminates, which is why the trigger is opt-in.
 */
int config_parse_signal(const char *s, int *sig)
{
  const char *p = s;
  uint64_t n;
  int v;

  if (!s || !*s)
    return -EINVAL;
  if (!strncasecmp(p, "SIG", 3))
    p += 3;
  if (!strcasecmp(p, "USR1")) {
    v = SIGUSR1;
  } else if (!strcasecmp(p, "USR2")) {
    v = SIGUSR2;
  } else if (!strncasecmp(p, "RTMIN", 5)) {
    const char *end = p + 5;
    n = 0;
    if (*end == '+' && (parse_u64(end + 1, &n, &end) || *end))
      return -EINVAL;
    if (*end && *end != '+')
      return -EINVAL;
    v = SIGRTMIN + (int)(n > 64 ? 64 : n);
  } else if (p == s && !parse_u64(s, &n, &p) && !*p && n <= 64) {
    v = (int)n;
  } else {
    return -EINVAL;
  }
  if (v != SIGUSR1 && v != SIGUSR2 && (v < SIGRTMIN || v > SIGRTMAX))
    return -EINVAL;
  *sig = v;
  return 0;
}

/* Index of s in names[], or -1. */
static int parse_enum(const char *s, const char *const *names, int n)
{
  for (int i = 0; i < n; i++)
    if (!strcasecmp(s, names[i]))
      return i;
  return -1;
}

/* ---- reporting ---- */

static void format_duration(uint64_t ns, char *buf, size_t len)
{
  if (ns % 1000000000ull == 0)
    snprintf(buf, len, "%llus", (unsigned long long)(ns / 1000000000ull));
  else if (ns % 1000000ull == 0)
    snprintf(buf, len, "%llums", (unsigned long long)(ns / 1000000ull));
  else if (ns % 1000ull == 0)
    snprintf(buf, len, "%lluus", (unsigned long long)(ns / 1000ull));
  else
    snprintf(buf, len, "%lluns", (unsigned long long)ns);
}

static void format_size(uint64_t b, char *buf, size_t len)
{
  if (b && b % (1ull << 30) == 0)
    snprintf(buf, len, "%lluG", (unsigned long long)(b >> 30));
  else if (b && b % (1ull << 20) == 0)
    snprintf(buf, len, "%lluM", (unsigned long long)(b >> 20));
  else if (b && b % (1ull << 10) == 0)
    snprintf(buf, len, "%lluK", (unsigned long long)(b >> 10));
  else
    snprintf(buf, len, "%llu", (unsigned long long)b);
}

#define QUOTE_MAX 256

/*
 * A value as a log line shows it: control bytes as \xNN, so that a newline cannot split the
 * one line into several nor an escape sequence reach a terminal; a long value is cut ("...").
 */
static const char *quote(const char *v, char *buf, size_t cap)
{
  size_t o = 0;

  for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
    if (o + 8 > cap) { /* room for one "\xNN", then "..." and the NUL */
      memcpy(buf + o, "...", 4);
      return buf;
    }
    if (*p < 0x20 || *p == 0x7f)
      o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", *p);
    else
      buf[o++] = (char)*p;
  }
  buf[o] = '\0';
  return buf;
}

static int has_control(const char *v)
{
  for (const unsigned char *p = (const unsigned char *)v; *p; p++)
    if (*p < 0x20 || *p == 0x7f)
      return 1;
  return 0;
}

/* The one line every bad value gets: names the variable, the value, and what happens now. */
static void bad_value(const char *var, const char *value, const char *what, const char *outcome)
{
  char shown[QUOTE_MAX];

  log_warn("%s='%s' is not %s; %s", var, quote(value, shown, sizeof(shown)), what, outcome);
}

/* getenv, treating an empty value as unset (manifests often template "VAR: ''"). */
static const char *env(const char *name)
{
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

static void load_string(const char *var, char *dst, size_t cap, const char *fallback_desc)
{
  const char *v = env(var);

  if (!v)
    return;
  if (strlen(v) >= cap) {
    char what[64];
    snprintf(what, sizeof(what), "at most %zu bytes long", cap - 1);
    bad_value(var, v, what, fallback_desc);
    return;
  }
  memcpy(dst, v, strlen(v) + 1);
}

/*
 * A path the agent uses later (directories, files, libraries): one with a control character
 * (a newline from a templated manifest) is refused here, because every later message about it
 * (cannot create, cannot load) would quote it raw and split the line.
 */
static void load_path(const char *var, char *dst, size_t cap, const char *fallback_desc)
{
  const char *v = env(var);

  if (v && has_control(v)) {
    bad_value(var, v, "a path without control characters", fallback_desc);
    return;
  }
  load_string(var, dst, cap, fallback_desc);
}

/*
 * A value uploaded as a Pyroscope label (service_name, pod, ...): a control character (a
 * newline from a templated manifest) would make it another series than the one dashboards
 * select, with nothing said; /ingest would silently turn it into '_'. Refused, with one line.
 */
static void load_label(const char *var, char *dst, size_t cap, const char *fallback_desc)
{
  const char *v = env(var);

  if (v && has_control(v)) {
    bad_value(var, v, "a label value without control characters", fallback_desc);
    return;
  }
  load_string(var, dst, cap, fallback_desc);
}

/*
 * Durations beyond a year are refused: they are typos, and deadlines computed as now + the
 * duration would wrap around 2^64 ns (a flush interval of "5124095h" would make the worker
 * wake without end).
 */
#define MAX_DURATION_NS (366ull * 86400 * 1000000000ull)

static int duration_too_long(const char *var, const char *v, uint64_t ns, const char *outcome)
{
  if (ns <= MAX_DURATION_NS)
    return 0;
  log_warn("%s='%s' is over the longest duration accepted (366 days); %s", var, v, outcome);
  return 1;
}

static void load_duration(const char *var, uint64_t *dst, uint64_t min_ns, const char *what)
{
  const char *v = env(var);
  uint64_t ns;
  char def[32], outcome[48];

  if (!v)
    return;
  if (config_parse_duration(v, &ns) == 0 && ns > MAX_DURATION_NS) {
    format_duration(*dst, def, sizeof(def));
    snprintf(outcome, sizeof(outcome), "using %s", def);
    duration_too_long(var, v, ns, outcome);
    return;
  }
  if (config_parse_duration(v, &ns) == 0 && ns >= min_ns) {
    *dst = ns;
    return;
  }
  format_duration(*dst, def, sizeof(def));
  snprintf(outcome, sizeof(outcome), "using %s", def);
  bad_value(var, v, what, outcome);
}

static void load_size(const char *var, uint64_t *dst, uint64_t min, uint64_t max, const char *what)
{
  const char *v = env(var);
  uint64_t b;
  char def[32], outcome[48];

  if (!v)
    return;
  if (config_parse_size(v, &b) == 0 && b >= min && b <= max) {
    *dst = b;
    return;
  }
  format_size(*dst, def, sizeof(def));
  snprintf(outcome, sizeof(outcome), "using %s", def);
  bad_value(var, v, what, outcome);
}

/*
 * The fast unwinder (unw_backtrace) keeps a per-thread trace cache that libunwind frees from a
 * pthread key destructor taking a mutex; under ThreadSanitizer that destructor runs after
 * TSan has torn the exiting thread down and crashes in its interceptor (GCC 12, libunwind
 * 1.6). TSan builds therefore default to the step-by-step unwinder, which has no such cache.
 */
#ifdef __SANITIZE_THREAD__
#define UNWIND_DEFAULT_SAFE 1
#else
#define UNWIND_DEFAULT_SAFE 0
#endif

static int load_enum(const char *var, const char *const *names, int n, int def, const char *what)
{
  const char *v = env(var);
  char outcome[64];
  int i;

  if (!v)
    return def;
  i = parse_enum(v, names, n);
  if (i >= 0)
    return i;
  snprintf(outcome, sizeof(outcome), "using %s", names[def]);
  bad_value(var, v, what, outcome);
  return def;
}

/* "k=v,k2=v2": keys [A-Za-z0-9_.-]+, values anything but ',' (may be empty). */
static int parse_tags(const char *s, struct config_tag *tags, size_t *n_tags)
{
  size_t n = 0;
  const char *p = s;

  while (*p) {
    const char *eq = strchr(p, '=');
    const char *comma = strchr(p, ',');
    size_t klen, vlen;

    if (!comma)
      comma = p + strlen(p);
    if (!eq || eq > comma || eq == p || n == CONFIG_TAGS_MAX)
      return -EINVAL;
    klen = (size_t)(eq - p);
    vlen = (size_t)(comma - eq - 1);
    if (klen >= sizeof(tags[0].key) || vlen >= sizeof(tags[0].value))
      return -EINVAL;
    for (size_t i = 0; i < klen; i++) {
      char c = p[i];
      if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '_' || c == '.' || c == '-'))
        return -EINVAL;
    }
    /* A value is uploaded as a label: a control character would make another series. */
    for (size_t i = 0; i < vlen; i++)
      if ((unsigned char)eq[1 + i] < 0x20 || eq[1 + i] == 0x7f)
        return -EINVAL;
    memcpy(tags[n].key, p, klen);
    tags[n].key[klen] = '\0';
    memcpy(tags[n].value, eq + 1, vlen);
    tags[n].value[vlen] = '\0';
    n++;
    p = *comma ? comma + 1 : comma;
  }
  *n_tags = n;
  return 0;
}

/* Edit distance, for "did you mean" on unknown names (names are short: 64 is plenty). */
static int edit_distance(const char *a, const char *b)
{
  int prev[65], cur[65];
  int la = (int)strlen(a), lb = (int)strlen(b);

  if (la > 64 || lb > 64)
    return 99;
  for (int j = 0; j <= lb; j++)
    prev[j] = j;
  for (int i = 1; i <= la; i++) {
    cur[0] = i;
    for (int j = 1; j <= lb; j++) {
      int sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
      int del = prev[j] + 1, ins = cur[j - 1] + 1;
      cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
    }
    memcpy(prev, cur, sizeof(int) * (size_t)(lb + 1));
  }
  return prev[lb];
}

static void check_unknown(void)
{
  for (char **e = environ; e && *e; e++) {
    const char *eq = strchr(*e, '=');
    char name[128];
    size_t len;
    const char *best = NULL;
    int best_d = 3; /* suggest only close matches: at most two edits */

    if (strncmp(*e, "GPUPROF_", 8) != 0 || !eq)
      continue;
    len = (size_t)(eq - *e);
    if (len >= sizeof(name))
      len = sizeof(name) - 1;
    memcpy(name, *e, len);
    name[len] = '\0';

    size_t i;
    for (i = 0; i < N_KNOWN; i++)
      if (!strcmp(name, known_vars[i]))
        break;
    if (i < N_KNOWN)
      continue;
    for (i = 0; i < N_KNOWN; i++) {
      int d = edit_distance(name, known_vars[i]);
      if (d < best_d) {
        best_d = d;
        best = known_vars[i];
      }
    }
    if (best)
      log_warn("%s is not a gpuprof setting (did you mean %s?); ignoring it", name, best);
    else
      log_warn("%s is not a gpuprof setting (see docs/CONFIGURATION.md); ignoring it", name);
  }
}

/* A plain unsigned integer in [min, max]; else a warning and the default stays. */
static void load_uint(const char *var, uint64_t *dst, uint64_t min, uint64_t max, const char *what)
{
  const char *v = env(var), *end;
  uint64_t x;
  char outcome[48];

  if (!v)
    return;
  if (parse_u64(v, &x, &end) == 0 && !*end && x >= min && x <= max) {
    *dst = x;
    return;
  }
  snprintf(outcome, sizeof(outcome), "using %llu", (unsigned long long)*dst);
  bad_value(var, v, what, outcome);
}

static void load_stacks(struct config *cfg)
{
  static const char *const unwind_modes[] = {"fast", "safe"};
  uint64_t depth = cfg->stack_depth, every = cfg->stack_sample_every;
  const char *v;

  load_uint("GPUPROF_STACK_DEPTH", &depth, 1, CONFIG_MAX_STACK_DEPTH,
            "a number of frames between 1 and 128");
  cfg->stack_depth = (uint32_t)depth;
  load_uint("GPUPROF_STACK_SAMPLE_EVERY", &every, 1, 1u << 20,
            "a number between 1 (every launch) and 1048576");
  cfg->stack_sample_every = (uint32_t)every;
  v = env("GPUPROF_STACK_SAMPLE_SEED");
  if (v) {
    const char *end;
    uint64_t seed;
    /* 0 is the "pick one at random" value: it is the default, never a seed one can set. */
    if (parse_u64(v, &seed, &end) == 0 && !*end && seed)
      cfg->stack_sample_seed = seed;
    else
      bad_value("GPUPROF_STACK_SAMPLE_SEED", v, "a positive integer", "using a random seed");
  }
  load_size("GPUPROF_STACK_TABLE_SIZE", &cfg->stack_table_size, 64ull << 10, 4ull << 30,
            "a size between 64K and 4G (e.g. 32M)");
  cfg->stack_unwind_safe =
      load_enum("GPUPROF_STACK_UNWIND", unwind_modes, 2, UNWIND_DEFAULT_SAFE, "one of fast, safe");
  v = env("GPUPROF_STACK_PYTHON");
  if (v && config_parse_bool(v, &cfg->stack_python)) {
    cfg->stack_python = 1;
    bad_value("GPUPROF_STACK_PYTHON", v, "0 or 1", "using 1");
  }
}

/*
 * A value sent in a request header (tenant, basic auth). Secrets made with `echo` end in a
 * newline, which is not part of the value: it would end the request's headers early. Any
 * other control character is an error: the value is not used (a secret is not quoted).
 */
static void load_header_value(const char *var, char *dst, size_t cap, int secret,
                              const char *fallback_desc)
{
  const char *v = env(var);
  size_t n = v ? strlen(v) : 0;

  if (!v)
    return;
  while (n && (v[n - 1] == '\n' || v[n - 1] == '\r'))
    n--;
  for (size_t i = 0; i < n; i++) {
    if ((unsigned char)v[i] < 0x20 || v[i] == 0x7f) {
      char shown[QUOTE_MAX];
      /* A secret is never quoted; another value is, escaped (it cannot split the line). */
      if (secret)
        log_warn("%s contains a control character (byte %zu); %s", var, i + 1, fallback_desc);
      else
        log_warn("%s contains a control character (byte %zu) in '%s'; %s", var, i + 1,
                 quote(v, shown, sizeof(shown)), fallback_desc);
      return;
    }
  }
  if (n >= cap) {
    if (secret)
      log_warn("%s is over %zu bytes; %s", var, cap - 1, fallback_desc);
    else
      load_string(var, dst, cap, fallback_desc); /* reports it */
    return;
  }
  memcpy(dst, v, n);
  dst[n] = '\0';
}

/* Pyroscope's tenant ID rule (Grafana dskit's ValidTenantID). */
static int tenant_valid(const char *t)
{
  size_t n = strlen(t);

  if (n > 150 || !strcmp(t, ".") || !strcmp(t, ".."))
    return 0;
  for (; *t; t++)
    if (!(*t >= 'a' && *t <= 'z') && !(*t >= 'A' && *t <= 'Z') && !(*t >= '0' && *t <= '9') &&
        !strchr("!-_.*'()", *t))
      return 0;
  return 1;
}

/* A Kubernetes secret mounted as a file: its first line (a trailing newline is not part of it). */
static void load_password_file(const char *var, char *dst, size_t cap)
{
  const char *path = env(var);
  char buf[1024], shown[QUOTE_MAX];
  ssize_t n;
  int fd;

  if (!path)
    return;
  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    log_warn("%s='%s' cannot be read (%s); uploading without a password", var,
             quote(path, shown, sizeof(shown)), strerror(errno));
    return;
  }
  n = read(fd, buf, sizeof(buf));
  close(fd);
  if (n < 0 || (size_t)n >= cap || (size_t)n >= sizeof(buf)) {
    log_warn("%s='%s' cannot be read or is over %zu bytes; uploading without a password", var,
             quote(path, shown, sizeof(shown)), cap - 1);
    return;
  }
  while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
    n--;
  memcpy(dst, buf, (size_t)n);
  dst[n] = '\0';
}

/* GPUPROF_PYROSCOPE_*, the upload settings and the Kubernetes labels (docs/PYROSCOPE.md). */
static void load_pyroscope(struct config *cfg)
{
  static const char *const apis[] = {"push", "ingest"};

  cfg->pyroscope_api = load_enum("GPUPROF_PYROSCOPE_API", apis, 2, 0, "one of push, ingest");
  load_header_value("GPUPROF_PYROSCOPE_USER", cfg->pyroscope_user, sizeof(cfg->pyroscope_user), 0,
                    "uploading without basic auth");
  if (env("GPUPROF_PYROSCOPE_PASSWORD") && env("GPUPROF_PYROSCOPE_PASSWORD_FILE"))
    log_warn("GPUPROF_PYROSCOPE_PASSWORD and GPUPROF_PYROSCOPE_PASSWORD_FILE are both set; "
             "using GPUPROF_PYROSCOPE_PASSWORD_FILE");
  if (env("GPUPROF_PYROSCOPE_PASSWORD_FILE"))
    load_password_file("GPUPROF_PYROSCOPE_PASSWORD_FILE", cfg->pyroscope_password,
                       sizeof(cfg->pyroscope_password));
  else
    load_header_value("GPUPROF_PYROSCOPE_PASSWORD", cfg->pyroscope_password,
                      sizeof(cfg->pyroscope_password), 1, "uploading without a password");
  if (cfg->pyroscope_password[0] && !cfg->pyroscope_user[0])
    log_warn("a Pyroscope password is set but GPUPROF_PYROSCOPE_USER is not; basic auth needs "
             "both, uploading without it");
  load_header_value("GPUPROF_PYROSCOPE_TENANT", cfg->pyroscope_tenant,
                    sizeof(cfg->pyroscope_tenant), 0, "uploading without X-Scope-OrgID");
  if (cfg->pyroscope_tenant[0] && !tenant_valid(cfg->pyroscope_tenant)) {
    /* The server would answer 401 to every upload: said once here instead. */
    bad_value("GPUPROF_PYROSCOPE_TENANT", cfg->pyroscope_tenant,
              "a tenant ID (at most 150 of A-Z a-z 0-9 ! - _ . * ' ( ), not . or ..)",
              "uploading without X-Scope-OrgID");
    cfg->pyroscope_tenant[0] = '\0';
  }
  load_duration("GPUPROF_UPLOAD_TIMEOUT", &cfg->upload_timeout_ns, 100000000ull,
                "a duration of at least 100ms (e.g. 10s)");
  load_uint("GPUPROF_UPLOAD_QUEUE", &cfg->upload_queue, 1, 4096,
            "a number of profiles between 1 and 4096");
  load_uint("GPUPROF_PYROSCOPE_MAX_SAMPLES", &cfg->pyroscope_max_samples, 1, 1ull << 30,
            "a number of samples between 1 and 1G (the server's max-profile-stacktrace-samples)");
  load_size("GPUPROF_PYROSCOPE_MAX_SIZE", &cfg->pyroscope_max_size, 64ull << 10, 1ull << 30,
            "a size between 64K and 1G (the server's max-profile-size-bytes)");
  load_duration("GPUPROF_EXIT_TIMEOUT", &cfg->exit_timeout_ns, 0,
                "a duration (e.g. 3s; 0 drops what is queued at exit)");
  load_label("GPUPROF_K8S_POD", cfg->k8s_pod, sizeof(cfg->k8s_pod), "leaving out the pod label");
  load_label("GPUPROF_K8S_NAMESPACE", cfg->k8s_namespace, sizeof(cfg->k8s_namespace),
             "leaving out the namespace label");
  load_label("GPUPROF_K8S_NODE", cfg->k8s_node, sizeof(cfg->k8s_node),
             "leaving out the node label");
}

void config_load(struct config *cfg)
{
  static const char *const modes[] = {"continuous", "ondemand", "off"};
  static const char *const levels[] = {"error", "warn", "info", "debug"};
  static const char *const stacks[] = {"off", "alloc", "sampled", "all"};
  static const char *const formats[] = {"json", "json.gz", "perfetto"};
  const char *v;

  config_defaults(cfg);

  /* First, so that everything below is reported at the level the user asked for. */
  cfg->log_level = (enum log_level)load_enum("GPUPROF_LOG", levels, 4, LOG_WARN,
                                             "one of error, warn, info, debug");
  log_set_level(cfg->log_level);

  cfg->mode = (enum config_mode)load_enum("GPUPROF_MODE", modes, 3, CONFIG_MODE_CONTINUOUS,
                                          "one of continuous, ondemand, off");
  load_path("GPUPROF_OUTPUT_DIR", cfg->output_dir, sizeof(cfg->output_dir),
            "using " CONFIG_DEFAULT_OUTPUT_DIR);
  load_duration("GPUPROF_WINDOW", &cfg->window_ns, 1000000000ull,
                "a duration of at least 1s (e.g. 15s, 1m)");
  cfg->stacks = (enum config_stacks)load_enum("GPUPROF_STACKS", stacks, 4, CONFIG_STACKS_SAMPLED,
                                              "one of off, alloc, sampled, all");

  v = env("GPUPROF_CAPTURE_ON_START");
  if (v && (config_parse_duration(v, &cfg->capture_on_start_ns) || !cfg->capture_on_start_ns)) {
    cfg->capture_on_start_ns = 0;
    bad_value("GPUPROF_CAPTURE_ON_START", v, "a positive duration (e.g. 60s)",
              "disabling the capture at start");
  } else if (v && cfg->capture_on_start_ns > CONFIG_MAX_CAPTURE_NS) {
    cfg->capture_on_start_ns = 0;
    log_warn("GPUPROF_CAPTURE_ON_START='%s' is over the longest capture (24h); disabling the "
             "capture at start",
             v);
  }

  v = env("GPUPROF_GPU_ONLY");
  if (v && config_parse_bool(v, &cfg->gpu_only)) {
    cfg->gpu_only = 0;
    bad_value("GPUPROF_GPU_ONLY", v, "0 or 1", "using 0");
  }

  v = env("GPUPROF_NVTX");
  if (v && config_parse_bool(v, &cfg->nvtx)) {
    cfg->nvtx = 1;
    bad_value("GPUPROF_NVTX", v, "0 or 1", "using 1");
  }

  v = env("GPUPROF_TRACE_FORMAT");
  cfg->trace_format_set = v && *v;
  cfg->trace_format = (enum config_trace_format)load_enum(
      "GPUPROF_TRACE_FORMAT", formats, 3, CONFIG_TRACE_JSON_GZ, "one of json, json.gz, perfetto");
  load_size("GPUPROF_TRACE_MAX_SIZE", &cfg->trace_max_size, 1ull << 20, 1ull << 40,
            "a size between 1M and 1T (e.g. 512M)");
  v = env("GPUPROF_CAPTURE_SIGNAL");
  if (v && config_parse_signal(v, &cfg->capture_signal)) {
    cfg->capture_signal = 0;
    bad_value("GPUPROF_CAPTURE_SIGNAL", v, "SIGUSR1, SIGUSR2 or SIGRTMIN+N", "no signal trigger");
  }
  load_path("GPUPROF_RUN_DIR", cfg->run_dir, sizeof(cfg->run_dir),
            "using " CONFIG_DEFAULT_OUTPUT_DIR "/run");

  v = env("GPUPROF_PYROSCOPE_URL");
  if (v) {
    /* A control character (a newline left by `echo`) is never part of a URL, and libcurl's
     * own message about it would quote it raw. */
    if ((strncmp(v, "http://", 7) && strncmp(v, "https://", 8)) ||
        strlen(v) >= sizeof(cfg->pyroscope_url) || has_control(v)) {
      /* Never its credentials (user:password@host) on stderr. */
      char shown[CONFIG_PATH_MAX];
      pyroscope_url_for_log(v, shown, sizeof(shown));
      bad_value("GPUPROF_PYROSCOPE_URL", shown, "an http:// or https:// URL",
                "disabling the Pyroscope upload");
    } else
      memcpy(cfg->pyroscope_url, v, strlen(v) + 1);
  }
  load_label("GPUPROF_APP_NAME", cfg->app_name, sizeof(cfg->app_name), "using the program name");

  v = env("GPUPROF_TAGS");
  if (v && parse_tags(v, cfg->tags, &cfg->n_tags)) {
    cfg->n_tags = 0;
    bad_value("GPUPROF_TAGS", v,
              "a list of key=value pairs separated by commas (at most 32, values without "
              "control characters)",
              "using no tags");
  }
  load_pyroscope(cfg);

  load_path("GPUPROF_CUPTI_PATH", cfg->cupti_path, sizeof(cfg->cupti_path),
            "searching for libcupti.so.13 instead");
  /* Test-only (docs/CONFIGURATION.md): hides the system and toolkit CUPTI from the search so
   * that a test can exercise the PyTorch-wheel search on a machine that has a toolkit. */
  v = env("GPUPROF_TEST_CUPTI_WHEELS_ONLY");
  if (v && config_parse_bool(v, &cfg->cupti_wheels_only)) {
    cfg->cupti_wheels_only = 0;
    bad_value("GPUPROF_TEST_CUPTI_WHEELS_ONLY", v, "0 or 1", "using 0");
  }
  /* Test-only: the library the Pyroscope uploader dlopens instead of libcurl.so.4, so that a
   * test can make it missing on a machine that has it. */
  load_path("GPUPROF_TEST_CURL_PATH", cfg->test_curl_path, sizeof(cfg->test_curl_path),
            "loading libcurl.so.4");
  load_path("GPUPROF_SUMMARY_FILE", cfg->summary_file, sizeof(cfg->summary_file),
            "using the default summary path");

  load_size("GPUPROF_BUFFER_SIZE", &cfg->buffer_size, CONFIG_MIN_BUFFER_SIZE, 1ull << 30,
            "a size between 64K and 1G (e.g. 4M)");
  load_size("GPUPROF_BUFFER_LIMIT", &cfg->buffer_limit, CONFIG_MIN_BUFFER_SIZE, 64ull << 30,
            "a size between 64K and 64G (e.g. 64M)");
  if (cfg->buffer_limit < cfg->buffer_size) {
    char size[32], what[64], outcome[64];
    format_size(cfg->buffer_size, size, sizeof(size));
    v = env("GPUPROF_BUFFER_LIMIT");
    if (v) {
      snprintf(what, sizeof(what), "at least GPUPROF_BUFFER_SIZE (%s)", size);
      snprintf(outcome, sizeof(outcome), "using %s (one buffer)", size);
      bad_value("GPUPROF_BUFFER_LIMIT", v, what, outcome);
    }
    /* Without GPUPROF_BUFFER_LIMIT a large GPUPROF_BUFFER_SIZE simply means one buffer. */
    cfg->buffer_limit = cfg->buffer_size;
  }
  load_duration("GPUPROF_FLUSH_INTERVAL", &cfg->flush_interval_ns, 1000000ull,
                "a duration of at least 1ms (e.g. 500ms)");

  v = env("GPUPROF_CORR_TABLE_SIZE");
  if (v) {
    uint64_t n;
    if (config_parse_size(v, &n) || n < 1024 || n > (1ull << 24)) {
      char def[32], outcome[48];
      format_size(cfg->corr_table_size, def, sizeof(def));
      snprintf(outcome, sizeof(outcome), "using %s", def);
      bad_value("GPUPROF_CORR_TABLE_SIZE", v, "a number of entries between 1K and 16M", outcome);
    } else {
      uint64_t p = 1;
      while (p < n)
        p <<= 1;
      cfg->corr_table_size = p;
    }
  }

  load_stacks(cfg);
  v = env("GPUPROF_PROFILE_FILES");
  if (v && config_parse_bool(v, &cfg->profile_files)) {
    cfg->profile_files = 1;
    bad_value("GPUPROF_PROFILE_FILES", v, "0 or 1", "using 1");
  }
  /* 0 turns the snapshots off; otherwise at least 1s, so that two snapshots never share the
   * second of their file names' time stamp. */
  v = env("GPUPROF_OOM_INTERVAL");
  if (v) {
    uint64_t ns;
    if (config_parse_duration(v, &ns) == 0 && ns > MAX_DURATION_NS)
      duration_too_long("GPUPROF_OOM_INTERVAL", v, ns, "using 60s");
    else if (config_parse_duration(v, &ns) == 0 && (ns == 0 || ns >= 1000000000ull))
      cfg->oom_interval_ns = ns;
    else
      bad_value("GPUPROF_OOM_INTERVAL", v, "0 (no snapshots) or a duration of at least 1s",
                "using 60s");
  }
  check_unknown();
}
