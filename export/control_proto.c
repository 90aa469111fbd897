/* The control protocol spoken on the agent's Unix socket (docs/CONTROL.md): message codec. */
#include "export/control_proto.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define MAGIC "GPUPROF/"

static const char *const command_names[] = {"status", "capture", "stop"};
static const char *const format_names[] = {"json", "json.gz", "perfetto"};

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static int fail(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t err_len, const char *fmt, ...)
{
  va_list ap;

  if (err && err_len) {
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
  }
  return -EINVAL;
}

size_t control_msg_complete(const char *buf, size_t len)
{
  /* The empty line: "\n\n", or "\n\r\n"; a message cannot start with one (it has a header). */
  for (size_t i = 1; i < len; i++) {
    if (buf[i] != '\n')
      continue;
    if (buf[i - 1] == '\n')
      return i + 1;
    if (buf[i - 1] == '\r' && i >= 2 && buf[i - 2] == '\n')
      return i + 1;
  }
  return 0;
}

static int is_key_char(char c)
{
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
}

static int is_word_char(char c)
{
  return (c >= 'a' && c <= 'z') || c == '-';
}

/* A token of [a-z-]{1,CONTROL_WORD_MAX-1}. */
static int valid_word(const char *s)
{
  size_t n = 0;

  for (; s[n]; n++)
    if (!is_word_char(s[n]))
      return 0;
  return n > 0 && n < CONTROL_WORD_MAX;
}

static int parse_header(char *line, struct control_msg *m, char *err, size_t err_len)
{
  char *p = line, *word, *code = NULL, *sp;
  unsigned version = 0;
  int digits = 0;

  if (strncmp(p, MAGIC, strlen(MAGIC)) != 0)
    return fail(err, err_len, "the first line must start with \"" MAGIC "%d\"",
                CONTROL_PROTO_VERSION);
  p += strlen(MAGIC);
  for (; *p >= '0' && *p <= '9'; p++) {
    if (++digits > 6)
      return fail(err, err_len, "the protocol version is not a small number");
    version = version * 10 + (unsigned)(*p - '0');
  }
  if (!digits || *p != ' ')
    return fail(err, err_len, "the first line must read \"" MAGIC "%d <command>\"",
                CONTROL_PROTO_VERSION);
  word = p + 1;
  sp = strchr(word, ' ');
  if (sp) {
    *sp = '\0';
    code = sp + 1;
  }
  if (!valid_word(word))
    return fail(err, err_len, "the command must be a lower-case word");
  if (code && !valid_word(code))
    return fail(err, err_len, "the word after the command must be a lower-case word");
  m->version = version;
  m->word = word;
  m->code = code;
  return 0;
}

/* key=value; tab and bytes >= 0x80 (UTF-8) are allowed in values, other controls are not. */
static int parse_field(char *line, struct control_msg *m, char *err, size_t err_len)
{
  char *eq = strchr(line, '=');
  size_t klen;

  if (!eq)
    return fail(err, err_len, "line %zu is not key=value", m->n_fields + 2);
  klen = (size_t)(eq - line);
  if (klen == 0 || klen > CONTROL_KEY_MAX)
    return fail(err, err_len, "line %zu: a key has 1 to %d characters", m->n_fields + 2,
                CONTROL_KEY_MAX);
  for (size_t i = 0; i < klen; i++)
    if (!is_key_char(line[i]))
      return fail(err, err_len, "line %zu: a key has only the characters a-z 0-9 _ .",
                  m->n_fields + 2);
  *eq = '\0';
  for (const unsigned char *v = (const unsigned char *)eq + 1; *v; v++)
    if ((*v < 0x20 && *v != '\t') || *v == 0x7f)
      return fail(err, err_len, "the value of %s holds a control character (0x%02x)", line, *v);
  if (m->n_fields == CONTROL_MAX_FIELDS)
    return fail(err, err_len, "more than %d fields", CONTROL_MAX_FIELDS);
  m->fields[m->n_fields].key = line;
  m->fields[m->n_fields].value = eq + 1;
  m->n_fields++;
  return 0;
}

int control_msg_parse(char *buf, size_t len, struct control_msg *m, char *err, size_t err_len)
{
  char *line = buf, *end = buf + len;
  int ret;

  memset(m, 0, sizeof(*m));
  if (len == 0)
    return fail(err, err_len, "empty message");
  if (memchr(buf, '\0', len))
    return fail(err, err_len, "the message holds a NUL byte");
  end = buf + control_msg_complete(buf, len);
  if (end == buf)
    return fail(err, err_len, "no empty line ends the message (truncated?)");
  if (end != buf + len)
    return fail(err, err_len, "data after the empty line (one message per connection)");
  for (int first = 1;; first = 0) {
    char *nl = memchr(line, '\n', (size_t)(end - line));

    /* complete() guarantees a newline before the end. */
    *nl = '\0';
    if (nl > line && nl[-1] == '\r')
      nl[-1] = '\0';
    if (first)
      ret = parse_header(line, m, err, err_len);
    else if (!*line)
      return 0; /* the empty line, which complete() placed at the end */
    else
      ret = parse_field(line, m, err, err_len);
    if (ret)
      return ret;
    line = nl + 1;
  }
}

const char *control_msg_get(const struct control_msg *m, const char *key)
{
  for (size_t i = 0; i < m->n_fields; i++)
    if (strcmp(m->fields[i].key, key) == 0)
      return m->fields[i].value;
  return NULL;
}

int control_parse_u64(const char *s, uint64_t *v)
{
  uint64_t x = 0;

  if (!*s)
    return -EINVAL;
  for (; *s; s++) {
    unsigned d = (unsigned)(*s - '0');

    if (*s < '0' || *s > '9' || x > (UINT64_MAX - d) / 10)
      return -EINVAL;
    x = x * 10 + d;
  }
  *v = x;
  return 0;
}

void control_writer_init(struct control_writer *w, char *buf, size_t cap)
{
  w->buf = buf;
  w->cap = cap;
  w->len = 0;
  w->overflow = 0;
  if (cap)
    buf[0] = '\0';
}

static void put(struct control_writer *w, const char *s, size_t n)
{
  /* One byte stays free for the terminating NUL. */
  if (w->overflow || w->len + n + 1 > w->cap) {
    w->overflow = 1;
    return;
  }
  memcpy(w->buf + w->len, s, n);
  w->len += n;
  w->buf[w->len] = '\0';
}

static void puts_(struct control_writer *w, const char *s)
{
  put(w, s, strlen(s));
}

void control_writer_header(struct control_writer *w, const char *word, const char *code)
{
  char head[32];

  snprintf(head, sizeof(head), MAGIC "%d ", CONTROL_PROTO_VERSION);
  puts_(w, head);
  puts_(w, word);
  if (code) {
    put(w, " ", 1);
    puts_(w, code);
  }
  put(w, "\n", 1);
}

static void add_value(struct control_writer *w, const char *key, const char *fmt, va_list ap)
{
  size_t start;
  int n;

  puts_(w, key);
  put(w, "=", 1);
  if (w->overflow)
    return;
  start = w->len;
  n = vsnprintf(w->buf + start, w->cap - start, fmt, ap);
  if (n < 0 || (size_t)n + 1 >= w->cap - start) {
    w->overflow = 1;
    return;
  }
  /* A value is one line: a newline in a path or a command line must not end it. */
  for (size_t i = start; i < start + (size_t)n; i++) {
    unsigned char c = (unsigned char)w->buf[i];
    if ((c < 0x20 && c != '\t') || c == 0x7f)
      w->buf[i] = ' ';
  }
  w->len += (size_t)n;
  put(w, "\n", 1);
}

void control_writer_add(struct control_writer *w, const char *key, const char *fmt, ...)
{
  va_list ap;

  va_start(ap, fmt);
  add_value(w, key, fmt, ap);
  va_end(ap);
}

void control_writer_add_u64(struct control_writer *w, const char *key, uint64_t v)
{
  control_writer_add(w, key, "%llu", (unsigned long long)v);
}

int control_writer_end(struct control_writer *w)
{
  put(w, "\n", 1);
  return w->overflow ? -ENOSPC : (int)w->len;
}

const char *control_command_name(enum control_command cmd)
{
  return (unsigned)cmd < ARRAY_LEN(command_names) ? command_names[cmd] : NULL;
}

const char *control_format_name(int format)
{
  return format >= 0 && (unsigned)format < ARRAY_LEN(format_names) ? format_names[format] : NULL;
}

int control_format_parse(const char *s)
{
  for (unsigned i = 0; i < ARRAY_LEN(format_names); i++)
    if (strcmp(s, format_names[i]) == 0)
      return (int)i;
  return -EINVAL;
}

void control_request_init(struct control_request *r, enum control_command cmd)
{
  memset(r, 0, sizeof(*r));
  r->cmd = cmd;
  r->gpu_only = -1;
  r->format = CONTROL_FORMAT_DEFAULT;
}

static int capture_field(struct control_request *r, const char *key, const char *value, char *err,
                         size_t err_len)
{
  uint64_t v;

  if (strcmp(key, "duration_ns") == 0) {
    if (control_parse_u64(value, &v) || v < CONTROL_MIN_DURATION_NS || v > CONTROL_MAX_DURATION_NS)
      return fail(err, err_len,
                  "duration_ns='%.64s' is not a number of nanoseconds in [%llu, %llu]", value,
                  CONTROL_MIN_DURATION_NS, CONTROL_MAX_DURATION_NS);
    r->duration_ns = v;
  } else if (strcmp(key, "gpu_only") == 0) {
    if (strcmp(value, "0") && strcmp(value, "1"))
      return fail(err, err_len, "gpu_only='%.64s' is not 0 or 1", value);
    r->gpu_only = value[0] - '0';
  } else if (strcmp(key, "format") == 0) {
    int f = control_format_parse(value);
    if (f < 0)
      return fail(err, err_len, "format='%.64s' is not json, json.gz or perfetto", value);
    r->format = f;
  } else if (strcmp(key, "output") == 0) {
    size_t n = strlen(value);
    if (value[0] != '/' || n >= sizeof(r->output_dir))
      return fail(err, err_len, "output='%.64s' is not an absolute path of at most %d bytes", value,
                  CONTROL_PATH_MAX - 1);
    memcpy(r->output_dir, value, n + 1);
  } else {
    return fail(err, err_len, "capture takes no key '%s' (duration_ns, gpu_only, format, output)",
                key);
  }
  return 0;
}

int control_request_parse(char *buf, size_t len, struct control_request *r, char *err,
                          size_t err_len)
{
  struct control_msg m;
  unsigned cmd;
  int ret;

  control_request_init(r, CONTROL_CMD_STATUS);
  ret = control_msg_parse(buf, len, &m, err, err_len);
  if (ret)
    return ret;
  if (m.version != CONTROL_PROTO_VERSION) {
    fail(err, err_len, "protocol version %u is not supported; this agent speaks " MAGIC "%d",
         m.version, CONTROL_PROTO_VERSION);
    return -EPROTO;
  }
  if (m.code)
    return fail(err, err_len, "a request header has one word after the version");
  for (cmd = 0; cmd < ARRAY_LEN(command_names); cmd++)
    if (strcmp(m.word, command_names[cmd]) == 0)
      break;
  if (cmd == ARRAY_LEN(command_names))
    return fail(err, err_len, "unknown command '%s' (status, capture, stop)", m.word);
  r->cmd = (enum control_command)cmd;
  for (size_t i = 0; i < m.n_fields; i++) {
    for (size_t j = 0; j < i; j++)
      if (strcmp(m.fields[i].key, m.fields[j].key) == 0)
        return fail(err, err_len, "key '%s' given twice", m.fields[i].key);
    if (r->cmd != CONTROL_CMD_CAPTURE)
      return fail(err, err_len, "%s takes no keys (got '%s')", m.word, m.fields[i].key);
    ret = capture_field(r, m.fields[i].key, m.fields[i].value, err, err_len);
    if (ret)
      return ret;
  }
  return 0;
}

int control_request_write(const struct control_request *r, char *buf, size_t cap)
{
  struct control_writer w;
  const char *name = control_command_name(r->cmd);

  if (!name)
    return -EINVAL;
  control_writer_init(&w, buf, cap);
  control_writer_header(&w, name, NULL);
  if (r->cmd == CONTROL_CMD_CAPTURE) {
    if (r->duration_ns) {
      if (r->duration_ns < CONTROL_MIN_DURATION_NS || r->duration_ns > CONTROL_MAX_DURATION_NS)
        return -EINVAL;
      control_writer_add_u64(&w, "duration_ns", r->duration_ns);
    }
    if (r->gpu_only >= 0)
      control_writer_add(&w, "gpu_only", "%d", r->gpu_only ? 1 : 0);
    if (r->format != CONTROL_FORMAT_DEFAULT) {
      if (!control_format_name(r->format))
        return -EINVAL;
      control_writer_add(&w, "format", "%s", control_format_name(r->format));
    }
    if (r->output_dir[0]) {
      if (r->output_dir[0] != '/' || strpbrk(r->output_dir, "\r\n"))
        return -EINVAL;
      control_writer_add(&w, "output", "%s", r->output_dir);
    }
  }
  return control_writer_end(&w);
}
