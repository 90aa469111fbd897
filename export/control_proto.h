/* The control protocol spoken on the agent's Unix socket (docs/CONTROL.md): message codec. */
#ifndef GPUPROF_EXPORT_CONTROL_PROTO_H
#define GPUPROF_EXPORT_CONTROL_PROTO_H

#include <stddef.h>
#include <stdint.h>

/*
 * Shared by the agent (parses requests, writes replies) and the gpuprof command (writes
 * requests, parses replies), which is why it lives in export/ and not in agent/: the command
 * must not depend on the agent's internals. Pure functions, no allocation, no I/O.
 *
 * A message is text: a header line "GPUPROF/<version> <word>[ <code>]", then "key=value"
 * lines, then an empty line. Lines end in "\n" (a "\r" before it is ignored). Keys are
 * [a-z0-9_.]{1,32}; values run to the end of the line and hold no control characters
 * except tab.
 */
#define CONTROL_PROTO_VERSION 1
#define CONTROL_REQUEST_MAX 4096   /* bytes; a longer request is refused ("too-large") */
#define CONTROL_RESPONSE_MAX 65536 /* bytes */
#define CONTROL_MAX_FIELDS 64
#define CONTROL_KEY_MAX 32
#define CONTROL_WORD_MAX 32
#define CONTROL_PATH_MAX 4096

/* Socket files: <run dir>/gpuprof-<pid>.sock; the run dir's default (GPUPROF_RUN_DIR). */
#define CONTROL_DEFAULT_RUN_DIR "/tmp/gpuprof/run"
#define CONTROL_SOCKET_PREFIX "gpuprof-"
#define CONTROL_SOCKET_SUFFIX ".sock"

/* Words of a reply header, and the error codes after "error" (docs/CONTROL.md). */
#define CONTROL_OK "ok"
#define CONTROL_ERROR "error"
#define CONTROL_E_BAD_REQUEST "bad-request"
#define CONTROL_E_VERSION "version"
#define CONTROL_E_TOO_LARGE "too-large"
#define CONTROL_E_TIMEOUT "timeout"
#define CONTROL_E_DENIED "denied"
#define CONTROL_E_BUSY "busy"
#define CONTROL_E_NOT_RUNNING "not-running"
#define CONTROL_E_INVALID "invalid"
#define CONTROL_E_FAILED "failed"

struct control_field {
  const char *key, *value;
};

/* A parsed message; every string points into the buffer it was parsed from. */
struct control_msg {
  unsigned version;
  const char *word; /* request: the command; reply: "ok" or "error" */
  const char *code; /* the token after the word (a reply's error code), or NULL */
  struct control_field fields[CONTROL_MAX_FIELDS];
  size_t n_fields;
};

/* The length of the first complete message in buf (through its empty line), 0 if none yet. */
size_t control_msg_complete(const char *buf, size_t len);

/*
 * Parses the complete message buf[0..len) in place (line ends become NULs). 0, or -EINVAL
 * with a one-line reason in err for anything malformed: a missing or bad header, a bad key,
 * a control character or NUL byte, too many fields, no empty line at exactly len.
 */
int control_msg_parse(char *buf, size_t len, struct control_msg *m, char *err, size_t err_len);

/* The value of the first field named key, or NULL. */
const char *control_msg_get(const struct control_msg *m, const char *key);

/* Strict unsigned decimal (digits only, no sign, no overflow). 0 or -EINVAL. */
int control_parse_u64(const char *s, uint64_t *v);

/* Writes a message into a caller's buffer; overflow is remembered, not fatal until the end. */
struct control_writer {
  char *buf;
  size_t cap, len;
  int overflow;
};

void control_writer_init(struct control_writer *w, char *buf, size_t cap);
/* The header line; code may be NULL. */
void control_writer_header(struct control_writer *w, const char *word, const char *code);
/* One field; the formatted value has control characters replaced by spaces. */
void control_writer_add(struct control_writer *w, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void control_writer_add_u64(struct control_writer *w, const char *key, uint64_t v);
/* Ends the message; its length, or -ENOSPC when it did not fit. */
int control_writer_end(struct control_writer *w);

/* Requests. */
enum control_command {
  CONTROL_CMD_STATUS = 0,
  CONTROL_CMD_CAPTURE,
  CONTROL_CMD_STOP,
};

/* Trace formats, in the order of the agent's enum config_trace_format. */
enum control_format {
  CONTROL_FORMAT_DEFAULT = -1,
  CONTROL_FORMAT_JSON = 0,
  CONTROL_FORMAT_JSON_GZ,
  CONTROL_FORMAT_PERFETTO,
};

#define CONTROL_MIN_DURATION_NS 1000000ull                     /* 1 ms */
#define CONTROL_MAX_DURATION_NS (24ull * 3600 * 1000000000ull) /* 24 h */

struct control_request {
  enum control_command cmd;
  /* capture only */
  uint64_t duration_ns;              /* 0: the agent's default */
  int gpu_only;                      /* -1: the agent's setting, else 0 or 1 */
  int format;                        /* enum control_format */
  char output_dir[CONTROL_PATH_MAX]; /* "": the agent's; else an absolute path */
};

/* A request with every optional value at "the agent's default". */
void control_request_init(struct control_request *r, enum control_command cmd);

/*
 * Parses and validates a complete request (buf[0..len), modified in place). 0; -EPROTO when
 * the header names another protocol version; -EINVAL for anything else wrong (unknown command,
 * unknown or repeated key, a value out of range). err gets a one-line reason.
 */
int control_request_parse(char *buf, size_t len, struct control_request *r, char *err,
                          size_t err_len);

/* Encodes a request; its length, -EINVAL for invalid values, -ENOSPC when cap is too small. */
int control_request_write(const struct control_request *r, char *buf, size_t cap);

const char *control_command_name(enum control_command cmd);
/* "json", "json.gz", "perfetto"; NULL for CONTROL_FORMAT_DEFAULT or out of range. */
const char *control_format_name(int format);
/* The enum control_format of a name, or -EINVAL. */
int control_format_parse(const char *s);

#endif
