/* agent/util/log.c: every message is one line on stderr, whatever the values it quotes. */
#include "agent/util/log.h"

#include "unit.h"

static void logged(char *out, size_t len, const char *value)
{
  struct stderr_capture c;

  stderr_capture_begin(&c);
  log_warn("cannot load '%s': %s", value, "gone");
  stderr_capture_end(&c, out, len);
}

static void test_control_bytes_escaped(void)
{
  char out[4096];

  logged(out, sizeof(out), "/opt/lib\nfake: line\x1b[2J\x7f\tend");
  CHECK_STR(out, "gpuprof: cannot load '/opt/lib\\x0afake: line\\x1b[2J\\x7f\\x09end': gone\n");
  CHECK_EQ(count_lines(out), 1);
}

static void test_utf8_kept(void)
{
  char out[4096];

  logged(out, sizeof(out), "/data/mod\xc3\xa8le.so");
  CHECK_STR(out, "gpuprof: cannot load '/data/mod\xc3\xa8le.so': gone\n");
}

/* A long message is cut to one line of at most 1024 bytes, its newline kept, and an escape
 * sequence is never cut in the middle. */
static void test_long_message_cut(void)
{
  char value[3000], out[4096];
  size_t n;

  for (size_t i = 0; i < sizeof(value) - 1; i++)
    value[i] = i % 2 ? '\n' : 'a';
  value[sizeof(value) - 1] = '\0';
  logged(out, sizeof(out), value);
  n = strlen(out);
  CHECK(n <= 1024);
  CHECK(n > 1000);
  CHECK_EQ(count_lines(out), 1);
  CHECK(out[n - 1] == '\n');
  /* The part before the newline ends with a whole "a\x0a" pair or an "a". */
  CHECK(out[n - 2] == 'a' || !strncmp(out + n - 5, "\\x0a", 4));
}

int main(void)
{
  log_set_level(LOG_DEBUG);
  RUN(test_control_bytes_escaped);
  RUN(test_utf8_kept);
  RUN(test_long_message_cut);
  UNIT_EXIT();
}
