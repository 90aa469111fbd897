/* A small buffered writer over write(2): the agent's replacement for stdio. */
#ifndef GPUPROF_AGENT_UTIL_FDWRITER_H
#define GPUPROF_AGENT_UTIL_FDWRITER_H

#include <stddef.h>

#define FD_WRITER_BUF 4096

/* write(2) until all of buf is written, retrying on EINTR. 0 or -errno; a reader that is gone
 * gives -EPIPE, never a SIGPIPE to the process. */
int fd_write_all(int fd, const void *buf, size_t len);

/*
 * Caller-owned (usually on the stack). Errors are sticky: after the first failed write(2)
 * every later call returns the same -errno and writes nothing, so a caller may check once
 * at the end.
 */
struct fd_writer {
  int fd;
  int err;
  size_t len;
  char buf[FD_WRITER_BUF];
};

void fd_writer_init(struct fd_writer *w, int fd);
int fd_writer_write(struct fd_writer *w, const char *data, size_t len);
int fd_writer_puts(struct fd_writer *w, const char *s);
/* printf-style; one call formats at most FD_WRITER_BUF bytes (longer output is truncated). */
int fd_writer_printf(struct fd_writer *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
int fd_writer_flush(struct fd_writer *w);

/* Adapter with the json_sink signature (export/json.h): ctx is a struct fd_writer. */
int fd_writer_sink(void *ctx, const char *data, size_t len);

#endif
