/* Unit tests of the streaming JSON writer (export/json.c). */
#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdint.h>

#include "export/json.h"
#include "unit.h"

struct mem_sink {
  char buf[4096];
  size_t len;
  int fail_after; /* fail once this many bytes were written; -1: never */
};

static int mem_write(void *ctx, const char *data, size_t len)
{
  struct mem_sink *s = ctx;

  if (s->fail_after >= 0 && s->len + len > (size_t)s->fail_after)
    return -ENOSPC;
  if (s->len + len >= sizeof(s->buf))
    return -ENOSPC;
  memcpy(s->buf + s->len, data, len);
  s->len += len;
  s->buf[s->len] = '\0';
  return 0;
}

static struct json_writer *open_mem(struct mem_sink *s, unsigned flags)
{
  memset(s, 0, sizeof(*s));
  s->fail_after = -1;
  return json_writer_new(mem_write, s, flags);
}

static void test_nesting_and_numbers(void)
{
  struct mem_sink s;
  struct json_writer *w = open_mem(&s, JSON_COMPACT);

  json_writer_begin_object(w);
  json_writer_kv_uint(w, "u", UINT64_MAX);
  json_writer_kv_int(w, "i", INT64_MIN);
  json_writer_kv_int(w, "zero", 0);
  json_writer_key(w, "list");
  json_writer_begin_array(w);
  json_writer_int(w, -1);
  json_writer_begin_object(w);
  json_writer_end_object(w);
  json_writer_begin_array(w);
  json_writer_end_array(w);
  json_writer_bool(w, 1);
  json_writer_null(w);
  json_writer_double(w, 0.1);
  json_writer_double(w, INFINITY);
  json_writer_end_array(w);
  json_writer_end_object(w);
  CHECK_EQ(json_writer_finish(w), 0);
  CHECK_STR(s.buf, "{\"u\":18446744073709551615,\"i\":-9223372036854775808,\"zero\":0,"
                   "\"list\":[-1,{},[],true,null,0.1,null]}");
  json_writer_free(w);
}

static void test_escaping(void)
{
  struct mem_sink s;
  struct json_writer *w = open_mem(&s, JSON_COMPACT);

  json_writer_begin_array(w);
  json_writer_string(w, "a\"b\\c\nd\te\x01\x1f"
                        "\xc3\xa9");
  json_writer_string_len(w, "x\0y", 3);
  json_writer_string(w, NULL);
  json_writer_end_array(w);
  CHECK_EQ(json_writer_finish(w), 0);
  CHECK_STR(s.buf, "[\"a\\\"b\\\\c\\nd\\te\\u0001\\u001f\xc3\xa9\",\"x\\u0000y\",null]");
  json_writer_free(w);
}

static void test_pretty(void)
{
  struct mem_sink s;
  struct json_writer *w = open_mem(&s, JSON_PRETTY);

  json_writer_begin_object(w);
  json_writer_kv_string(w, "a", "b");
  json_writer_key(w, "c");
  json_writer_begin_array(w);
  json_writer_uint(w, 1);
  json_writer_end_array(w);
  json_writer_key(w, "e");
  json_writer_begin_object(w);
  json_writer_end_object(w);
  json_writer_end_object(w);
  CHECK_EQ(json_writer_finish(w), 0);
  CHECK_STR(s.buf, "{\n  \"a\": \"b\",\n  \"c\": [\n    1\n  ],\n  \"e\": {}\n}\n");
  json_writer_free(w);
}

static void test_misuse(void)
{
  struct mem_sink s;
  struct json_writer *w;

  /* A value where a key is due. */
  w = open_mem(&s, 0);
  json_writer_begin_object(w);
  CHECK_EQ(json_writer_uint(w, 1), (unsigned long long)-EINVAL);
  /* Sticky: later valid calls fail too and write nothing. */
  CHECK_EQ(json_writer_end_object(w), (unsigned long long)-EINVAL);
  CHECK_STR(s.buf, "{");
  json_writer_free(w);

  /* Unbalanced end, key in an array, unfinished document, two top-level values. */
  w = open_mem(&s, 0);
  CHECK_EQ(json_writer_end_array(w), (unsigned long long)-EINVAL);
  json_writer_free(w);
  w = open_mem(&s, 0);
  json_writer_begin_array(w);
  CHECK_EQ(json_writer_key(w, "k"), (unsigned long long)-EINVAL);
  json_writer_free(w);
  w = open_mem(&s, 0);
  json_writer_begin_array(w);
  CHECK_EQ(json_writer_finish(w), (unsigned long long)-EINVAL);
  json_writer_free(w);
  w = open_mem(&s, 0);
  json_writer_uint(w, 1);
  CHECK_EQ(json_writer_uint(w, 2), (unsigned long long)-EINVAL);
  json_writer_free(w);

  /* Too deep. */
  w = open_mem(&s, 0);
  for (int i = 0; i < JSON_MAX_DEPTH; i++)
    CHECK_EQ(json_writer_begin_array(w), 0);
  CHECK_EQ(json_writer_begin_array(w), (unsigned long long)-EINVAL);
  json_writer_free(w);

  CHECK(json_writer_new(NULL, NULL, 0) == NULL);
  json_writer_free(NULL);
}

static void test_sink_error(void)
{
  struct mem_sink s;
  struct json_writer *w = open_mem(&s, 0);

  s.fail_after = 5;
  json_writer_begin_array(w);
  json_writer_string(w, "long enough to fail");
  CHECK_EQ(json_writer_error(w), (unsigned long long)-ENOSPC);
  CHECK_EQ(json_writer_end_array(w), (unsigned long long)-ENOSPC);
  CHECK_EQ(json_writer_finish(w), (unsigned long long)-ENOSPC);
  json_writer_free(w);
}

/* A host program that set a locale whose decimal point is a comma (de_DE, fr_FR...) still gets
 * JSON numbers: "0.5", never "0,5" (which a reader takes as two values or rejects). Skipped
 * where no such locale is installed (LOCPATH may point at one made by localedef). */
static void test_double_locale(void)
{
  static const char *comma[] = {"de_DE.UTF-8", "de_DE.utf8",  "fr_FR.UTF-8",
                                "fr_FR.utf8",  "ru_RU.UTF-8", "nl_NL.UTF-8"};
  struct mem_sink s;
  struct json_writer *w;
  size_t i;

  char dir[] = "/tmp/gpuprof-test-json-XXXXXX", cmd[256];

  for (i = 0; i < sizeof(comma) / sizeof(comma[0]); i++)
    if (setlocale(LC_NUMERIC, comma[i]))
      break;
  /* None installed (a bare image): make de_DE from glibc's sources when they are there. */
  if (i == sizeof(comma) / sizeof(comma[0]) && mkdtemp(dir)) {
    snprintf(cmd, sizeof(cmd), "localedef -i de_DE -f UTF-8 %s/de_DE.UTF-8 >/dev/null 2>&1", dir);
    if (system(cmd) == 0 && setenv("LOCPATH", dir, 1) == 0 && setlocale(LC_NUMERIC, comma[0]))
      i = 0;
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
      fprintf(stderr, "test_double_locale: could not remove %s\n", dir);
  }
  if (i == sizeof(comma) / sizeof(comma[0])) {
    fprintf(stderr, "test_double_locale: no comma locale installed; skipped\n");
    return;
  }
  w = open_mem(&s, JSON_COMPACT);
  json_writer_begin_array(w);
  json_writer_double(w, 0.5);
  json_writer_double(w, -1234.25);
  json_writer_double(w, 1e-300);
  json_writer_double(w, 0.1);
  json_writer_end_array(w);
  CHECK_EQ(json_writer_finish(w), 0);
  CHECK_STR(s.buf, "[0.5,-1234.25,1e-300,0.1]");
  json_writer_free(w);
  setlocale(LC_NUMERIC, "C");
}

int main(void)
{
  RUN(test_nesting_and_numbers);
  RUN(test_escaping);
  RUN(test_pretty);
  RUN(test_misuse);
  RUN(test_sink_error);
  RUN(test_double_locale);
  UNIT_EXIT();
}
