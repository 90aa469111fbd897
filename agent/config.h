/* The agent's configuration: every GPUPROF_* environment variable, read once at init. */
#ifndef GPUPROF_AGENT_CONFIG_H
#define GPUPROF_AGENT_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "agent/util/log.h"

enum config_mode {
  CONFIG_MODE_CONTINUOUS = 0,
  CONFIG_MODE_ONDEMAND,
  CONFIG_MODE_OFF,
};

enum config_stacks {
  CONFIG_STACKS_OFF = 0,
  CONFIG_STACKS_ALLOC,
  CONFIG_STACKS_SAMPLED,
  CONFIG_STACKS_ALL,
};

enum config_trace_format {
  CONFIG_TRACE_JSON = 0,
  CONFIG_TRACE_JSON_GZ,
  CONFIG_TRACE_PERFETTO,
};

#define CONFIG_PATH_MAX 4096
#define CONFIG_TAGS_MAX 32

struct config_tag {
  char key[64];
  char value[192];
};

/*
 * Filled by config_load() inside the one-time init and read-only afterwards, so every thread
 * may read it without synchronization. Strings are copied out of the environment (a later
 * setenv by the application cannot change them under us).
 */
struct config {
  enum config_mode mode;
  char output_dir[CONFIG_PATH_MAX];
  enum log_level log_level;
  uint64_t window_ns;
  enum config_stacks stacks;
  uint64_t capture_on_start_ns; /* 0: no capture at start */
  int gpu_only;
  int nvtx; /* GPUPROF_NVTX: record NVTX ranges in full captures when NVTX is injected */
  enum config_trace_format trace_format;
  int trace_format_set;    /* GPUPROF_TRACE_FORMAT was given (else captures may pick by size) */
  uint64_t trace_max_size; /* size cap of one capture's trace file, bytes */
  int capture_signal;      /* 0: no signal trigger; else the signal that starts/stops a capture */
  char run_dir[CONFIG_PATH_MAX];
  char pyroscope_url[CONFIG_PATH_MAX]; /* "": no upload */
  char app_name[256];
  struct config_tag tags[CONFIG_TAGS_MAX];
  size_t n_tags;
  /* Pyroscope upload (agent/uploader.h, docs/PYROSCOPE.md). */
  int pyroscope_api;        /* 0: /push (protobuf), 1: /ingest (multipart) */
  char pyroscope_user[256]; /* basic auth; "": none */
  char pyroscope_password[1024];
  char pyroscope_tenant[256];     /* X-Scope-OrgID; "": none */
  uint64_t upload_timeout_ns;     /* per request */
  uint64_t upload_queue;          /* profiles waiting for upload, at most */
  uint64_t pyroscope_max_samples; /* a window with more is pushed in parts of this many */
  uint64_t pyroscope_max_size;    /* uncompressed pprof bytes per upload, at most */
  uint64_t exit_timeout_ns;       /* the final flush's deadline at exit */
  char k8s_pod[256];              /* Kubernetes downward API: labels pod, namespace, node */
  char k8s_namespace[256];
  char k8s_node[256];
  char cupti_path[CONFIG_PATH_MAX]; /* "": search (cupti/loader.c) */
  int cupti_wheels_only; /* test knob GPUPROF_TEST_CUPTI_WHEELS_ONLY: search wheels only */
  char test_curl_path[CONFIG_PATH_MAX]; /* test knob GPUPROF_TEST_CURL_PATH; "": libcurl.so.4 */
  char summary_file[CONFIG_PATH_MAX];   /* "": <output_dir>/gpuprof-<host>-<pid>-summary.json */
  uint64_t buffer_size;
  uint64_t buffer_limit;
  uint64_t flush_interval_ns;
  uint64_t corr_table_size; /* entries, a power of two */
  /* Host stacks (agent/hoststack.h). */
  uint32_t stack_depth;        /* frames kept per stack, 1..STACK_MAX_DEPTH */
  uint32_t stack_sample_every; /* sampled policy: one launch in this many per thread */
  uint64_t stack_sample_seed;  /* 0: a fresh seed per process */
  uint64_t stack_table_size;   /* memory cap of the stack table, bytes */
  int stack_python;            /* merge CPython frames */
  int stack_unwind_safe;       /* GPUPROF_STACK_UNWIND=safe */
  int profile_files;           /* GPUPROF_PROFILE_FILES: write pprof window files */
  uint64_t oom_interval_ns;    /* GPUPROF_OOM_INTERVAL: at most one OOM snapshot per; 0: none */
};

/* Defaults, also quoted by docs/CONFIGURATION.md. */
#define CONFIG_DEFAULT_OUTPUT_DIR "/tmp/gpuprof"
/* The longest capture, at start or on demand (the control protocol's limit too). */
#define CONFIG_MAX_CAPTURE_NS (24ull * 3600 * 1000000000ull)
#define CONFIG_DEFAULT_WINDOW_NS (15ull * 1000000000ull)
#define CONFIG_DEFAULT_BUFFER_SIZE (4ull << 20)
#define CONFIG_DEFAULT_BUFFER_LIMIT (64ull << 20)
#define CONFIG_DEFAULT_FLUSH_INTERVAL_NS (500ull * 1000000ull)
#define CONFIG_DEFAULT_CORR_TABLE_SIZE (1ull << 17)
#define CONFIG_MIN_BUFFER_SIZE (64ull << 10)
#define CONFIG_DEFAULT_STACK_DEPTH 64
#define CONFIG_MAX_STACK_DEPTH 128
#define CONFIG_DEFAULT_STACK_SAMPLE_EVERY 16
#define CONFIG_DEFAULT_STACK_TABLE_SIZE (32ull << 20)
#define CONFIG_DEFAULT_UPLOAD_TIMEOUT_NS (10ull * 1000000000ull)
#define CONFIG_DEFAULT_UPLOAD_QUEUE 32
#define CONFIG_DEFAULT_PYROSCOPE_MAX_SAMPLES 16000     /* Pyroscope's default per profile */
#define CONFIG_DEFAULT_PYROSCOPE_MAX_SIZE (4ull << 20) /* max-profile-size-bytes' default */
#define CONFIG_DEFAULT_EXIT_TIMEOUT_NS (3ull * 1000000000ull)
#define CONFIG_DEFAULT_TRACE_MAX_SIZE (512ull << 20)
#define CONFIG_DEFAULT_OOM_INTERVAL_NS (60ull * 1000000000ull)

/*
 * Reads the environment into *cfg. Never fails: a value that does not parse is reported on
 * stderr in one line naming the variable and value, and its default is used (or the feature
 * is disabled); GPUPROF_* variables this version does not know are reported once each (most
 * are typos). Sets the log threshold first so that later messages honour GPUPROF_LOG.
 */
void config_load(struct config *cfg);

/* The defaults alone, without reading the environment. */
void config_defaults(struct config *cfg);

/* Parsers, exported for tests. Return 0 or -EINVAL. */
int config_parse_duration(const char *s, uint64_t *ns);
int config_parse_size(const char *s, uint64_t *bytes);
int config_parse_bool(const char *s, int *v);
/* "SIGUSR1", "USR2", "SIGRTMIN+3", or their numbers: the signals a trigger may use. */
int config_parse_signal(const char *s, int *sig);

const char *config_mode_name(enum config_mode mode);

#endif
