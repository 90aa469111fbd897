/* Unit tests of the configuration parsers and of config_load's messages (agent/config.c). */
#include <errno.h>

#include "agent/config.h"
#include "unit.h"

extern char **environ;

static void clear_gpuprof_env(void)
{
  /* Collect first: unsetenv modifies environ while we walk it. */
  char names[64][128];
  int n = 0;

  for (char **e = environ; *e && n < 64; e++) {
    const char *eq = strchr(*e, '=');
    if (!strncmp(*e, "GPUPROF_", 8) && eq && (size_t)(eq - *e) < sizeof(names[0])) {
      memcpy(names[n], *e, (size_t)(eq - *e));
      names[n][eq - *e] = '\0';
      n++;
    }
  }
  for (int i = 0; i < n; i++)
    unsetenv(names[i]);
}

/* config_load with the environment set, capturing what it writes to stderr. */
static void load_capture(struct config *cfg, char *out, size_t len)
{
  struct stderr_capture c;

  stderr_capture_begin(&c);
  config_load(cfg);
  stderr_capture_end(&c, out, len);
}

static void test_durations(void)
{
  uint64_t ns;

  CHECK_EQ(config_parse_duration("15s", &ns), 0);
  CHECK_EQ(ns, 15000000000ull);
  CHECK_EQ(config_parse_duration("500ms", &ns), 0);
  CHECK_EQ(ns, 500000000ull);
  CHECK_EQ(config_parse_duration("2m", &ns), 0);
  CHECK_EQ(ns, 120000000000ull);
  CHECK_EQ(config_parse_duration("1h", &ns), 0);
  CHECK_EQ(ns, 3600000000000ull);
  CHECK_EQ(config_parse_duration("250us", &ns), 0);
  CHECK_EQ(ns, 250000ull);
  CHECK_EQ(config_parse_duration("7", &ns), 0); /* bare number: seconds */
  CHECK_EQ(ns, 7000000000ull);
  CHECK_EQ(config_parse_duration("", &ns), (unsigned long long)-EINVAL);
  CHECK_EQ(config_parse_duration("s", &ns), (unsigned long long)-EINVAL);
  CHECK_EQ(config_parse_duration("-1s", &ns), (unsigned long long)-EINVAL);
  CHECK_EQ(config_parse_duration("1.5s", &ns), (unsigned long long)-EINVAL);
  CHECK_EQ(config_parse_duration("10 s", &ns), (unsigned long long)-EINVAL);
  CHECK_EQ(config_parse_duration("5x", &ns), (unsigned long long)-EINVAL);
  CHECK_EQ(config_parse_duration("99999999999999999999s", &ns), (unsigned long long)-EINVAL);
  CHECK_EQ(config_parse_duration("9999999999999h", &ns), (unsigned long long)-EINVAL);
}

static void test_sizes_and_bools(void)
{
  uint64_t b;
  int v;

  CHECK_EQ(config_parse_size("4M", &b), 0);
  CHECK_EQ(b, 4ull << 20);
  CHECK_EQ(config_parse_size("64k", &b), 0);
  CHECK_EQ(b, 64ull << 10);
  CHECK_EQ(config_parse_size("1GiB", &b), 0);
  CHECK_EQ(b, 1ull << 30);
  CHECK_EQ(config_parse_size("123", &b), 0);
  CHECK_EQ(b, 123);
  CHECK_EQ(config_parse_size("4MBs", &b), (unsigned long long)-EINVAL);
  CHECK_EQ(config_parse_size("M", &b), (unsigned long long)-EINVAL);
  CHECK_EQ(config_parse_size("99999999999999G", &b), (unsigned long long)-EINVAL);

  CHECK_EQ(config_parse_bool("1", &v), 0);
  CHECK_EQ(v, 1);
  CHECK_EQ(config_parse_bool("off", &v), 0);
  CHECK_EQ(v, 0);
  CHECK_EQ(config_parse_bool("2", &v), (unsigned long long)-EINVAL);
}

static void test_defaults(void)
{
  struct config cfg;
  char err[4096];

  clear_gpuprof_env();
  load_capture(&cfg, err, sizeof(err));
  CHECK_STR(err, "");
  CHECK_EQ(cfg.mode, CONFIG_MODE_CONTINUOUS);
  CHECK_STR(cfg.output_dir, "/tmp/gpuprof");
  CHECK_EQ(cfg.log_level, LOG_WARN);
  CHECK_EQ(cfg.window_ns, 15000000000ull);
  CHECK_EQ(cfg.stacks, CONFIG_STACKS_SAMPLED);
  CHECK_EQ(cfg.capture_on_start_ns, 0);
  CHECK_EQ(cfg.buffer_size, 4ull << 20);
  CHECK_EQ(cfg.buffer_limit, 64ull << 20);
  CHECK_EQ(cfg.flush_interval_ns, 500000000ull);
  CHECK_EQ(cfg.corr_table_size, 1ull << 17);
  CHECK_STR(cfg.cupti_path, "");
  CHECK_STR(cfg.summary_file, "");
}

static void test_good_values(void)
{
  struct config cfg;
  char err[4096];

  clear_gpuprof_env();
  setenv("GPUPROF_MODE", "ondemand", 1);
  setenv("GPUPROF_OUTPUT_DIR", "/data/out", 1);
  setenv("GPUPROF_LOG", "error", 1);
  setenv("GPUPROF_WINDOW", "1m", 1);
  setenv("GPUPROF_STACKS", "all", 1);
  setenv("GPUPROF_CAPTURE_ON_START", "60s", 1);
  setenv("GPUPROF_GPU_ONLY", "1", 1);
  setenv("GPUPROF_TRACE_FORMAT", "perfetto", 1);
  setenv("GPUPROF_PYROSCOPE_URL", "http://pyroscope:4040", 1);
  setenv("GPUPROF_APP_NAME", "vllm", 1);
  setenv("GPUPROF_TAGS", "pod=a-1,ns=prod,empty=", 1);
  setenv("GPUPROF_CUPTI_PATH", "/opt/libcupti.so.13", 1);
  setenv("GPUPROF_SUMMARY_FILE", "/tmp/s.json", 1);
  setenv("GPUPROF_BUFFER_SIZE", "1M", 1);
  setenv("GPUPROF_BUFFER_LIMIT", "8M", 1);
  setenv("GPUPROF_FLUSH_INTERVAL", "100ms", 1);
  setenv("GPUPROF_CORR_TABLE_SIZE", "3000", 1);
  load_capture(&cfg, err, sizeof(err));
  CHECK_STR(err, "");
  CHECK_EQ(cfg.mode, CONFIG_MODE_ONDEMAND);
  CHECK_STR(cfg.output_dir, "/data/out");
  CHECK_EQ(cfg.log_level, LOG_ERROR);
  CHECK_EQ(cfg.window_ns, 60000000000ull);
  CHECK_EQ(cfg.stacks, CONFIG_STACKS_ALL);
  CHECK_EQ(cfg.capture_on_start_ns, 60000000000ull);
  CHECK_EQ(cfg.gpu_only, 1);
  CHECK_EQ(cfg.trace_format, CONFIG_TRACE_PERFETTO);
  CHECK_STR(cfg.pyroscope_url, "http://pyroscope:4040");
  CHECK_STR(cfg.app_name, "vllm");
  CHECK_EQ(cfg.n_tags, 3);
  CHECK_STR(cfg.tags[0].key, "pod");
  CHECK_STR(cfg.tags[0].value, "a-1");
  CHECK_STR(cfg.tags[2].key, "empty");
  CHECK_STR(cfg.tags[2].value, "");
  CHECK_STR(cfg.cupti_path, "/opt/libcupti.so.13");
  CHECK_STR(cfg.summary_file, "/tmp/s.json");
  CHECK_EQ(cfg.buffer_size, 1ull << 20);
  CHECK_EQ(cfg.buffer_limit, 8ull << 20);
  CHECK_EQ(cfg.flush_interval_ns, 100000000ull);
  CHECK_EQ(cfg.corr_table_size, 4096); /* rounded up to a power of two */
  log_set_level(LOG_WARN);
}

/* One variable set to `value` must produce exactly the line `expected`. */
static void check_bad(const char *var, const char *value, const char *expected)
{
  struct config cfg;
  char err[4096];

  clear_gpuprof_env();
  setenv(var, value, 1);
  load_capture(&cfg, err, sizeof(err));
  CHECK_EQ(count_lines(err), count_lines(expected));
  CHECK_STR(err, expected);
}

static void test_bad_values(void)
{
  check_bad(
      "GPUPROF_MODE", "fast",
      "gpuprof: GPUPROF_MODE='fast' is not one of continuous, ondemand, off; using continuous\n");
  check_bad("GPUPROF_LOG", "loud",
            "gpuprof: GPUPROF_LOG='loud' is not one of error, warn, info, debug; using warn\n");
  check_bad("GPUPROF_WINDOW", "soon",
            "gpuprof: GPUPROF_WINDOW='soon' is not a duration of at least 1s (e.g. 15s, 1m); using "
            "15s\n");
  check_bad(
      "GPUPROF_STACKS", "some",
      "gpuprof: GPUPROF_STACKS='some' is not one of off, alloc, sampled, all; using sampled\n");
  check_bad("GPUPROF_CAPTURE_ON_START", "1 minute",
            "gpuprof: GPUPROF_CAPTURE_ON_START='1 minute' is not a positive duration (e.g. 60s); "
            "disabling the capture at start\n");
  check_bad("GPUPROF_CAPTURE_ON_START", "86401s",
            "gpuprof: GPUPROF_CAPTURE_ON_START='86401s' is over the longest capture (24h); "
            "disabling the capture at start\n");
  check_bad("GPUPROF_GPU_ONLY", "maybe",
            "gpuprof: GPUPROF_GPU_ONLY='maybe' is not 0 or 1; using 0\n");
  check_bad(
      "GPUPROF_TRACE_FORMAT", "xml",
      "gpuprof: GPUPROF_TRACE_FORMAT='xml' is not one of json, json.gz, perfetto; using json.gz\n");
  check_bad("GPUPROF_PYROSCOPE_URL", "pyroscope:4040",
            "gpuprof: GPUPROF_PYROSCOPE_URL='pyroscope:4040' is not an http:// or https:// URL; "
            "disabling the Pyroscope upload\n");
  check_bad("GPUPROF_TAGS", "pod",
            "gpuprof: GPUPROF_TAGS='pod' is not a list of key=value pairs separated by commas (at "
            "most 32, values without control characters); using no tags\n");
  check_bad("GPUPROF_TAGS", "team=ml\tops",
            "gpuprof: GPUPROF_TAGS='team=ml\\x09ops' is not a list of key=value pairs separated by "
            "commas (at most 32, values without control characters); using no tags\n");
  check_bad(
      "GPUPROF_BUFFER_SIZE", "4X",
      "gpuprof: GPUPROF_BUFFER_SIZE='4X' is not a size between 64K and 1G (e.g. 4M); using 4M\n");
  check_bad(
      "GPUPROF_BUFFER_SIZE", "1K",
      "gpuprof: GPUPROF_BUFFER_SIZE='1K' is not a size between 64K and 1G (e.g. 4M); using 4M\n");
  check_bad("GPUPROF_BUFFER_LIMIT", "1M",
            "gpuprof: GPUPROF_BUFFER_LIMIT='1M' is not at least GPUPROF_BUFFER_SIZE (4M); using 4M "
            "(one buffer)\n");
  check_bad("GPUPROF_FLUSH_INTERVAL", "0",
            "gpuprof: GPUPROF_FLUSH_INTERVAL='0' is not a duration of at least 1ms (e.g. 500ms); "
            "using 500ms\n");
  check_bad("GPUPROF_CORR_TABLE_SIZE", "12",
            "gpuprof: GPUPROF_CORR_TABLE_SIZE='12' is not a number of entries between 1K and 16M; "
            "using 128K\n");
  check_bad("GPUPROF_WINDW", "30s",
            "gpuprof: GPUPROF_WINDW is not a gpuprof setting (did you mean GPUPROF_WINDOW?); "
            "ignoring it\n");
  check_bad("GPUPROF_ZZZZZZZZZZZZ", "1",
            "gpuprof: GPUPROF_ZZZZZZZZZZZZ is not a gpuprof setting (see docs/CONFIGURATION.md); "
            "ignoring it\n");

  /* GPUPROF_LOG=error silences warnings, including these. */
  {
    struct config cfg;
    char err[4096];
    clear_gpuprof_env();
    setenv("GPUPROF_LOG", "error", 1);
    setenv("GPUPROF_MODE", "fast", 1);
    load_capture(&cfg, err, sizeof(err));
    CHECK_STR(err, "");
    log_set_level(LOG_WARN);
  }

  /* Empty values are treated as unset. */
  check_bad("GPUPROF_MODE", "", "");
}

/* The limits docs/CONFIGURATION.md gives can be written as given, at both ends. */
static void test_documented_limits(void)
{
  struct config cfg;
  char err[4096];
  uint64_t b;

  CHECK_EQ(config_parse_size("1T", &b), 0);
  CHECK_EQ(b, 1ull << 40);
  CHECK_EQ(config_parse_size("2tib", &b), 0);
  CHECK_EQ(b, 2ull << 40);
  CHECK_EQ(config_parse_size("99999999T", &b), (unsigned long long)-EINVAL);

  clear_gpuprof_env();
  setenv("GPUPROF_TRACE_MAX_SIZE", "1T", 1);
  setenv("GPUPROF_STACK_TABLE_SIZE", "4G", 1);
  setenv("GPUPROF_BUFFER_SIZE", "1G", 1);
  setenv("GPUPROF_BUFFER_LIMIT", "64G", 1);
  setenv("GPUPROF_CORR_TABLE_SIZE", "16M", 1);
  setenv("GPUPROF_STACK_DEPTH", "128", 1);
  setenv("GPUPROF_STACK_SAMPLE_EVERY", "1048576", 1);
  setenv("GPUPROF_UPLOAD_QUEUE", "4096", 1);
  setenv("GPUPROF_PYROSCOPE_MAX_SAMPLES", "1073741824", 1);
  setenv("GPUPROF_CAPTURE_ON_START", "24h", 1);
  load_capture(&cfg, err, sizeof(err));
  CHECK_STR(err, "");
  CHECK_EQ(cfg.trace_max_size, 1ull << 40);
  CHECK_EQ(cfg.stack_table_size, 4ull << 30);
  CHECK_EQ(cfg.buffer_size, 1ull << 30);
  CHECK_EQ(cfg.buffer_limit, 64ull << 30);
  CHECK_EQ(cfg.corr_table_size, 1ull << 24);
  CHECK_EQ(cfg.stack_depth, 128);
  CHECK_EQ(cfg.stack_sample_every, 1048576);
  CHECK_EQ(cfg.upload_queue, 4096);
  CHECK_EQ(cfg.pyroscope_max_samples, 1ull << 30);
  CHECK_EQ(cfg.capture_on_start_ns, 24ull * 3600 * 1000000000ull);

  check_bad("GPUPROF_TRACE_MAX_SIZE", "1025G",
            "gpuprof: GPUPROF_TRACE_MAX_SIZE='1025G' is not a size between 1M and 1T (e.g. 512M); "
            "using 512M\n");
}

/* The defaults docs/CONFIGURATION.md's table gives. */
static void test_documented_defaults(void)
{
  struct config cfg;
  char err[4096];

  clear_gpuprof_env();
  load_capture(&cfg, err, sizeof(err));
  CHECK_STR(err, "");
  CHECK_EQ(cfg.profile_files, 1);
  CHECK_EQ(cfg.oom_interval_ns, 60000000000ull);
  CHECK_EQ(cfg.stack_depth, 64);
  CHECK_EQ(cfg.stack_sample_every, 16);
  CHECK_EQ(cfg.stack_sample_seed, 0); /* random */
  CHECK_EQ(cfg.stack_table_size, 32ull << 20);
  CHECK_EQ(cfg.stack_python, 1);
  CHECK_EQ(cfg.gpu_only, 0);
  CHECK_EQ(cfg.trace_format_set, 0);
  CHECK_EQ(cfg.trace_max_size, 512ull << 20);
  CHECK_EQ(cfg.capture_signal, 0);
  CHECK_STR(cfg.run_dir, "/tmp/gpuprof/run");
  CHECK_STR(cfg.pyroscope_url, "");
  CHECK_EQ(cfg.n_tags, 0);
  CHECK_EQ(cfg.pyroscope_api, 0);
  CHECK_EQ(cfg.upload_timeout_ns, 10000000000ull);
  CHECK_EQ(cfg.pyroscope_max_samples, 16000);
  CHECK_EQ(cfg.upload_queue, 32);
  CHECK_EQ(cfg.exit_timeout_ns, 3000000000ull);
}

/* GPUPROF_PYROSCOPE_MAX_SIZE: the server's max-profile-size-bytes, 4M unless set, 64K..1G. */
static void test_pyroscope_max_size(void)
{
  struct config cfg;
  char err[4096];

  clear_gpuprof_env();
  load_capture(&cfg, err, sizeof(err));
  CHECK_STR(err, "");
  CHECK_EQ(cfg.pyroscope_max_size, 4ull << 20);
  setenv("GPUPROF_PYROSCOPE_MAX_SIZE", "64K", 1);
  load_capture(&cfg, err, sizeof(err));
  CHECK_STR(err, "");
  CHECK_EQ(cfg.pyroscope_max_size, 64ull << 10);
  setenv("GPUPROF_PYROSCOPE_MAX_SIZE", "1G", 1);
  load_capture(&cfg, err, sizeof(err));
  CHECK_STR(err, "");
  CHECK_EQ(cfg.pyroscope_max_size, 1ull << 30);
  setenv("GPUPROF_PYROSCOPE_MAX_SIZE", "3000000", 1);
  load_capture(&cfg, err, sizeof(err));
  CHECK_STR(err, "");
  CHECK_EQ(cfg.pyroscope_max_size, 3000000);

  check_bad("GPUPROF_PYROSCOPE_MAX_SIZE", "65535",
            "gpuprof: GPUPROF_PYROSCOPE_MAX_SIZE='65535' is not a size between 64K and 1G (the "
            "server's max-profile-size-bytes); using 4M\n");
  check_bad("GPUPROF_PYROSCOPE_MAX_SIZE", "2G",
            "gpuprof: GPUPROF_PYROSCOPE_MAX_SIZE='2G' is not a size between 64K and 1G (the "
            "server's max-profile-size-bytes); using 4M\n");
  check_bad("GPUPROF_PYROSCOPE_MAX_SIZE", "big",
            "gpuprof: GPUPROF_PYROSCOPE_MAX_SIZE='big' is not a size between 64K and 1G (the "
            "server's max-profile-size-bytes); using 4M\n");
}

/* Pyroscope's tenant ID rule (dskit ValidTenantID): anything else gets 401 on every upload. */
static void test_pyroscope_tenant(void)
{
  static const char *const good[] = {"team-a", "A.b_c*(1)'!", "..x"};
  static const char *const bad[] = {".", "..", "team a", "team/a", "t\xc3\xa9"};
  char err[4096], want[512], long_id[152];
  struct config cfg;

  for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
    clear_gpuprof_env();
    setenv("GPUPROF_PYROSCOPE_TENANT", good[i], 1);
    load_capture(&cfg, err, sizeof(err));
    CHECK_STR(err, "");
    CHECK_STR(cfg.pyroscope_tenant, good[i]);
  }
  memset(long_id, 'a', 151);
  long_id[151] = '\0';
  for (size_t i = 0; i <= sizeof(bad) / sizeof(bad[0]); i++) {
    const char *v = i < sizeof(bad) / sizeof(bad[0]) ? bad[i] : long_id;
    snprintf(want, sizeof(want),
             "gpuprof: GPUPROF_PYROSCOPE_TENANT='%s' is not a tenant ID (at most 150 of A-Z a-z "
             "0-9 ! - _ . * ' ( ), not . or ..); uploading without X-Scope-OrgID\n",
             v);
    clear_gpuprof_env();
    setenv("GPUPROF_PYROSCOPE_TENANT", v, 1);
    load_capture(&cfg, err, sizeof(err));
    CHECK_STR(err, want);
    CHECK_STR(cfg.pyroscope_tenant, "");
  }
}

/* Variables of the `gpuprof` command reach the agent through `gpuprof run`'s environment: they
 * are settings, not typos. */
static void test_cli_vars_known(void)
{
  check_bad("GPUPROF_AGENT", "/opt/gpuprof/lib/libgpuprof.so", "");
}

/* A bad seed falls back to a random one, and the line says so (not "using 0"). */
static void test_bad_seed(void)
{
  check_bad("GPUPROF_STACK_SAMPLE_SEED", "0",
            "gpuprof: GPUPROF_STACK_SAMPLE_SEED='0' is not a positive integer; using a random "
            "seed\n");
}

static void test_mode_off(void)
{
  struct config cfg;
  char err[4096];

  clear_gpuprof_env();
  setenv("GPUPROF_MODE", "OFF", 1);
  load_capture(&cfg, err, sizeof(err));
  CHECK_EQ(cfg.mode, CONFIG_MODE_OFF);
  CHECK_STR(config_mode_name(cfg.mode), "off");
}

int main(void)
{
  RUN(test_durations);
  RUN(test_sizes_and_bools);
  RUN(test_defaults);
  RUN(test_good_values);
  RUN(test_bad_values);
  RUN(test_mode_off);
  RUN(test_documented_limits);
  RUN(test_documented_defaults);
  RUN(test_bad_seed);
  RUN(test_cli_vars_known);
  RUN(test_pyroscope_max_size);
  RUN(test_pyroscope_tenant);
  UNIT_EXIT();
}
