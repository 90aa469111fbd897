/* Leveled logging to stderr through write(2), with a prefix per module; safe on callback paths. */
#ifndef GPUPROF_AGENT_UTIL_LOG_H
#define GPUPROF_AGENT_UTIL_LOG_H

#include <stdatomic.h>

/*
 * Each .c file may define LOG_MODULE (e.g. "cupti") before including this header; messages
 * then read "gpuprof: cupti: ...". Without it they read "gpuprof: ...".
 *
 * Messages are formatted into a stack buffer and written with one write(2) to fd 2: no stdio,
 * no malloc, no lock, so they may be issued from CUPTI callbacks and agent threads. A message
 * issued while the same thread is already inside the logger (a signal handler, say) is
 * dropped instead of recursing.
 */
#ifndef LOG_MODULE
#define LOG_MODULE NULL
#endif

enum log_level {
  LOG_ERROR = 0,
  LOG_WARN = 1,
  LOG_INFO = 2,
  LOG_DEBUG = 3,
};

/* The threshold; read with one relaxed load on every log call. Default LOG_WARN. */
extern atomic_int log_threshold;

void log_set_level(enum log_level level);

static inline int log_enabled(enum log_level level)
{
  return (int)level <= atomic_load_explicit(&log_threshold, memory_order_relaxed);
}

/* Formats and writes one line (a newline is appended). module may be NULL. */
void log_write(enum log_level level, const char *module, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define log_at(level, ...)                                                                         \
  do {                                                                                             \
    if (log_enabled(level))                                                                        \
      log_write(level, LOG_MODULE, __VA_ARGS__);                                                   \
  } while (0)

#define log_error(...) log_at(LOG_ERROR, __VA_ARGS__)
#define log_warn(...) log_at(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_at(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_at(LOG_DEBUG, __VA_ARGS__)

/* Logs the first time this call site is reached with the level enabled, never again. */
#define log_once(level, ...)                                                                       \
  do {                                                                                             \
    static atomic_int log_once_;                                                                   \
    if (log_enabled(level) && !atomic_exchange_explicit(&log_once_, 1, memory_order_relaxed))      \
      log_write(level, LOG_MODULE, __VA_ARGS__);                                                   \
  } while (0)

#define log_warn_once(...) log_once(LOG_WARN, __VA_ARGS__)
#define log_info_once(...) log_once(LOG_INFO, __VA_ARGS__)

#endif
