/* Leveled logging to stderr through write(2), with a prefix per module; safe on callback paths. */
#include "agent/util/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "agent/util/fdwriter.h"

#define LOG_LINE_MAX 1024

atomic_int log_threshold = LOG_WARN;

/* Set while this thread formats or writes a message; a nested call is dropped. */
static __thread int log_busy;

void log_set_level(enum log_level level)
{
  atomic_store_explicit(&log_threshold, (int)level, memory_order_relaxed);
}

void log_write(enum log_level level, const char *module, const char *fmt, ...)
{
  char line[LOG_LINE_MAX], msg[LOG_LINE_MAX];
  size_t len;
  int n;
  va_list ap;
  int saved = errno; /* never disturb the application's errno */

  (void)level;
  if (log_busy)
    return;
  log_busy = 1;

  if (module)
    n = snprintf(line, sizeof(line), "gpuprof: %s: ", module);
  else
    n = snprintf(line, sizeof(line), "gpuprof: ");
  len = n > 0 ? (size_t)n : 0;

  va_start(ap, fmt);
  n = vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  /* One message is one line: a control byte from a value it quotes (a path or a library's
   * error text with a newline, an escape sequence) is shown as \xNN, so it can neither split
   * the line nor reach a terminal. Truncated messages keep their newline: room is left. */
  for (const unsigned char *m = (const unsigned char *)msg; n > 0 && *m; m++) {
    if (*m >= 0x20 && *m != 0x7f) {
      if (len + 1 > sizeof(line) - 1)
        break;
      line[len++] = (char)*m;
    } else {
      if (len + 4 > sizeof(line) - 1)
        break;
      len += (size_t)snprintf(line + len, 5, "\\x%02x", *m);
    }
  }
  line[len++] = '\n';

  fd_write_all(STDERR_FILENO, line, len);
  log_busy = 0;
  errno = saved;
}
