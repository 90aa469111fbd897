/* Unit tests of the control protocol codec: valid and malformed messages, and a fuzz run. */
#include <errno.h>
#include <stdint.h>

#include "agent/config.h"
#include "export/control_proto.h"
#include "tests/unit/unit.h"

/* Parses a string literal (copied: parsing is in place). */
static int parse_req(const char *text, struct control_request *r, char *err, size_t err_len)
{
  static char buf[CONTROL_REQUEST_MAX * 2];
  size_t n = strlen(text);

  memcpy(buf, text, n + 1);
  return control_request_parse(buf, n, r, err, err_len);
}

static void test_valid_requests(void)
{
  struct control_request r;
  char err[256];

  CHECK_EQ(parse_req("GPUPROF/1 status\n\n", &r, err, sizeof(err)), 0);
  CHECK_EQ(r.cmd, CONTROL_CMD_STATUS);
  CHECK_EQ(r.gpu_only, -1);
  CHECK_EQ(r.format, CONTROL_FORMAT_DEFAULT);
  CHECK_EQ(parse_req("GPUPROF/1 stop\r\n\r\n", &r, err, sizeof(err)), 0);
  CHECK_EQ(r.cmd, CONTROL_CMD_STOP);
  CHECK_EQ(parse_req("GPUPROF/1 capture\nduration_ns=2500000000\ngpu_only=1\nformat=perfetto\n"
                     "output=/data/my traces\n\n",
                     &r, err, sizeof(err)),
           0);
  CHECK_EQ(r.cmd, CONTROL_CMD_CAPTURE);
  CHECK_EQ(r.duration_ns, 2500000000ull);
  CHECK_EQ(r.gpu_only, 1);
  CHECK_EQ(r.format, CONTROL_FORMAT_PERFETTO);
  CHECK_STR(r.output_dir, "/data/my traces");
  /* Every key is optional. */
  CHECK_EQ(parse_req("GPUPROF/1 capture\nformat=json.gz\n\n", &r, err, sizeof(err)), 0);
  CHECK_EQ(r.duration_ns, 0);
  CHECK_EQ(r.format, CONTROL_FORMAT_JSON_GZ);
  CHECK_STR(r.output_dir, "");
}

struct bad {
  const char *text;
  int ret;
  const char *reason; /* a substring of the error */
};

static void test_malformed_requests(void)
{
  static const struct bad cases[] = {
      {"", -EINVAL, "empty"},
      {"GPUPROF/1 status\n", -EINVAL, "no empty line"},
      {"GPUPROF/1 status", -EINVAL, "no empty line"},
      {"\n\n", -EINVAL, "first line"},
      {"HTTP/1.1 GET\n\n", -EINVAL, "first line"},
      {"GPUPROF/ status\n\n", -EINVAL, "first line"},
      {"GPUPROF/1status\n\n", -EINVAL, "first line"},
      {"GPUPROF/1234567 status\n\n", -EINVAL, "version"},
      {"GPUPROF/2 status\n\n", -EPROTO, "version 2"},
      {"GPUPROF/1 STATUS\n\n", -EINVAL, "lower-case"},
      {"GPUPROF/1 status \n\n", -EINVAL, "lower-case"},
      {"GPUPROF/1 status now\n\n", -EINVAL, "one word"},
      {"GPUPROF/1 reboot\n\n", -EINVAL, "unknown command 'reboot'"},
      {"GPUPROF/1 status\nx=1\n\n", -EINVAL, "status takes no keys"},
      {"GPUPROF/1 capture\nduration=5s\n\n", -EINVAL, "no key 'duration'"},
      {"GPUPROF/1 capture\nduration_ns\n\n", -EINVAL, "not key=value"},
      {"GPUPROF/1 capture\n=1\n\n", -EINVAL, "1 to 32"},
      {"GPUPROF/1 capture\nDuration_ns=1\n\n", -EINVAL, "a-z 0-9"},
      {"GPUPROF/1 capture\nabcdefghijabcdefghijabcdefghijabc=1\n\n", -EINVAL, "1 to 32"},
      {"GPUPROF/1 capture\nduration_ns=0\n\n", -EINVAL, "duration_ns='0'"},
      {"GPUPROF/1 capture\nduration_ns=999999\n\n", -EINVAL, "duration_ns"},
      {"GPUPROF/1 capture\nduration_ns=86400000000001\n\n", -EINVAL, "duration_ns"},
      {"GPUPROF/1 capture\nduration_ns=99999999999999999999999\n\n", -EINVAL, "duration_ns"},
      {"GPUPROF/1 capture\nduration_ns=-5\n\n", -EINVAL, "duration_ns"},
      {"GPUPROF/1 capture\nduration_ns=5s\n\n", -EINVAL, "duration_ns"},
      {"GPUPROF/1 capture\nduration_ns=\n\n", -EINVAL, "duration_ns"},
      {"GPUPROF/1 capture\ngpu_only=2\n\n", -EINVAL, "gpu_only='2'"},
      {"GPUPROF/1 capture\nformat=xml\n\n", -EINVAL, "format='xml'"},
      {"GPUPROF/1 capture\noutput=relative/dir\n\n", -EINVAL, "absolute"},
      {"GPUPROF/1 capture\noutput=\n\n", -EINVAL, "absolute"},
      {"GPUPROF/1 capture\noutput=/a\x01"
       "b\n\n",
       -EINVAL, "control character"},
      {"GPUPROF/1 capture\ngpu_only=1\ngpu_only=0\n\n", -EINVAL, "twice"},
      {"GPUPROF/1 status\n\nGPUPROF/1 status\n\n", -EINVAL, "after the empty line"},
      {"GPUPROF/1 status\n\nx", -EINVAL, "after the empty line"},
  };
  struct control_request r;
  char err[256];

  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    int ret;

    err[0] = '\0';
    ret = parse_req(cases[i].text, &r, err, sizeof(err));
    if (ret != cases[i].ret || !strstr(err, cases[i].reason)) {
      fprintf(stderr, "case %zu: got %d '%s', expected %d '%s'\n", i, ret, err, cases[i].ret,
              cases[i].reason);
      unit_failures++;
    }
  }
}

static void test_nul_and_limits(void)
{
  char buf[CONTROL_REQUEST_MAX * 2];
  struct control_request r;
  char err[256];
  size_t n;

  /* A NUL byte inside the message. */
  memcpy(buf, "GPUPROF/1 status\n\0\n\n", 20);
  CHECK_EQ(control_request_parse(buf, 20, &r, err, sizeof(err)), -EINVAL);
  CHECK(strstr(err, "NUL") != NULL);

  /* 64 fields are allowed, 65 are not (duplicates are checked later, so the count first). */
  n = (size_t)sprintf(buf, "GPUPROF/1 capture\n");
  for (int i = 0; i < CONTROL_MAX_FIELDS + 1; i++)
    n += (size_t)sprintf(buf + n, "k%d=v\n", i);
  n += (size_t)sprintf(buf + n, "\n");
  CHECK_EQ(control_request_parse(buf, n, &r, err, sizeof(err)), -EINVAL);
  CHECK(strstr(err, "more than 64 fields") != NULL);

  /* A path of CONTROL_PATH_MAX bytes does not fit (the NUL). */
  n = (size_t)sprintf(buf, "GPUPROF/1 capture\noutput=/");
  memset(buf + n, 'a', CONTROL_PATH_MAX - 1);
  n += CONTROL_PATH_MAX - 1;
  n += (size_t)sprintf(buf + n, "\n\n");
  CHECK_EQ(control_request_parse(buf, n, &r, err, sizeof(err)), -EINVAL);
  CHECK(strstr(err, "absolute path of at most 4095") != NULL);
}

static void test_complete(void)
{
  CHECK_EQ(control_msg_complete("", 0), 0);
  CHECK_EQ(control_msg_complete("\n", 1), 0);
  CHECK_EQ(control_msg_complete("GPUPROF/1 status\n", 17), 0);
  CHECK_EQ(control_msg_complete("GPUPROF/1 status\n\n", 18), 18);
  CHECK_EQ(control_msg_complete("GPUPROF/1 status\r\n\r\n", 20), 20);
  CHECK_EQ(control_msg_complete("GPUPROF/1 status\n\nmore", 22), 18);
  /* Only the prefix counts: a blank line beyond len is not seen. */
  CHECK_EQ(control_msg_complete("GPUPROF/1 status\n\n", 17), 0);
}

static void test_write_roundtrip(void)
{
  struct control_request r, back;
  char buf[CONTROL_REQUEST_MAX], err[256];
  int n;

  control_request_init(&r, CONTROL_CMD_CAPTURE);
  r.duration_ns = 60000000000ull;
  r.gpu_only = 0;
  r.format = CONTROL_FORMAT_JSON;
  snprintf(r.output_dir, sizeof(r.output_dir), "/out/dir");
  n = control_request_write(&r, buf, sizeof(buf));
  CHECK(n > 0);
  CHECK_STR(buf, "GPUPROF/1 capture\nduration_ns=60000000000\ngpu_only=0\nformat=json\n"
                 "output=/out/dir\n\n");
  CHECK_EQ(control_request_parse(buf, (size_t)n, &back, err, sizeof(err)), 0);
  CHECK_EQ(back.duration_ns, r.duration_ns);
  CHECK_EQ(back.gpu_only, 0);
  CHECK_EQ(back.format, CONTROL_FORMAT_JSON);
  CHECK_STR(back.output_dir, "/out/dir");

  control_request_init(&r, CONTROL_CMD_STATUS);
  n = control_request_write(&r, buf, sizeof(buf));
  CHECK_STR(buf, "GPUPROF/1 status\n\n");
  CHECK_EQ(n, 18);
  /* Too small a buffer, and values the parser would refuse, are not written. */
  CHECK_EQ(control_request_write(&r, buf, 10), -ENOSPC);
  control_request_init(&r, CONTROL_CMD_CAPTURE);
  r.duration_ns = 5;
  CHECK_EQ(control_request_write(&r, buf, sizeof(buf)), -EINVAL);
  control_request_init(&r, CONTROL_CMD_CAPTURE);
  snprintf(r.output_dir, sizeof(r.output_dir), "/a\nb");
  CHECK_EQ(control_request_write(&r, buf, sizeof(buf)), -EINVAL);
}

static void test_writer_and_reply(void)
{
  struct control_writer w;
  struct control_msg m;
  char buf[256], err[128];
  int n;

  control_writer_init(&w, buf, sizeof(buf));
  control_writer_header(&w, CONTROL_ERROR, CONTROL_E_BUSY);
  control_writer_add(&w, "message", "line one\nline\ttwo\r");
  control_writer_add_u64(&w, "capture.id", 18446744073709551615ull);
  control_writer_add(&w, "capture.file", "/a");
  control_writer_add(&w, "capture.file", "/b");
  n = control_writer_end(&w);
  CHECK_STR(buf, "GPUPROF/1 error busy\nmessage=line one line\ttwo \n"
                 "capture.id=18446744073709551615\ncapture.file=/a\ncapture.file=/b\n\n");
  CHECK_EQ(control_msg_parse(buf, (size_t)n, &m, err, sizeof(err)), 0);
  CHECK_EQ(m.version, 1);
  CHECK_STR(m.word, "error");
  CHECK_STR(m.code, "busy");
  CHECK_EQ(m.n_fields, 4);
  CHECK_STR(control_msg_get(&m, "capture.file"), "/a");
  CHECK_STR(m.fields[3].value, "/b");
  CHECK(control_msg_get(&m, "nothing") == NULL);

  /* Overflow is sticky and reported at the end. */
  control_writer_init(&w, buf, 24);
  control_writer_header(&w, CONTROL_OK, NULL);
  control_writer_add(&w, "command", "%s", "a long command line that does not fit");
  CHECK_EQ(control_writer_end(&w), -ENOSPC);
}

static void test_u64(void)
{
  uint64_t v = 7;

  CHECK_EQ(control_parse_u64("0", &v), 0);
  CHECK_EQ(v, 0);
  CHECK_EQ(control_parse_u64("18446744073709551615", &v), 0);
  CHECK_EQ(v, UINT64_MAX);
  CHECK_EQ(control_parse_u64("18446744073709551616", &v), -EINVAL);
  CHECK_EQ(control_parse_u64("", &v), -EINVAL);
  CHECK_EQ(control_parse_u64("+1", &v), -EINVAL);
  CHECK_EQ(control_parse_u64("1 ", &v), -EINVAL);
}

static void test_defaults_agree(void)
{
  struct config cfg;

  /* The command and the agent must look in the same place by default. */
  config_defaults(&cfg);
  CHECK_STR(cfg.run_dir, CONTROL_DEFAULT_RUN_DIR);
}

/* xorshift64*: deterministic, so a failure reproduces. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 2685821657736338717ull;
}

static const char *const seeds[] = {
    "GPUPROF/1 status\n\n",
    "GPUPROF/1 stop\n\n",
    "GPUPROF/1 capture\nduration_ns=2000000000\ngpu_only=1\nformat=json\noutput=/tmp/x\n\n",
    "GPUPROF/1 capture\r\nformat=json.gz\r\n\r\n",
};

/*
 * Random bytes and mutations of valid requests (flips, insertions, deletions, truncation,
 * splices of protocol tokens). Every input must either be refused with a reason, or be
 * accepted as a request that writes back and parses again to the same values.
 */
static void test_fuzz(void)
{
  static const char *const tokens[] = {
      "\n",        "\r\n",    "=",        "\n\n", "GPUPROF/1 ", "capture", "duration_ns=",
      "gpu_only=", "format=", "output=/", "\0",   "\x7f",       "\xff",    "99999999999999999999"};
  char buf[CONTROL_REQUEST_MAX + 64], copy[CONTROL_REQUEST_MAX + 64], out[CONTROL_REQUEST_MAX];
  int accepted = 0, refused = 0, bad = 0;

  for (int iter = 0; iter < 200000; iter++) {
    struct control_request r, back;
    char err[256];
    size_t n;
    int ret;

    if (iter % 8 == 0) {
      n = rnd() % 64;
      for (size_t i = 0; i < n; i++)
        buf[i] = (char)(rnd() & 0xff);
    } else {
      const char *s = seeds[rnd() % (sizeof(seeds) / sizeof(seeds[0]))];
      n = strlen(s);
      memcpy(buf, s, n);
      for (int k = 1 + (int)(rnd() % 4); k > 0; k--) {
        size_t at = n ? rnd() % (n + 1) : 0;
        switch (rnd() % 5) {
        case 0: /* flip a byte */
          if (at < n)
            buf[at] = (char)(rnd() & 0xff);
          break;
        case 1: /* delete a range */
          if (at < n) {
            size_t len = 1 + rnd() % (n - at);
            memmove(buf + at, buf + at + len, n - at - len);
            n -= len;
          }
          break;
        case 2: { /* insert a token */
          const char *t = tokens[rnd() % (sizeof(tokens) / sizeof(tokens[0]))];
          size_t len = t[0] ? strlen(t) : 1;
          if (n + len < CONTROL_REQUEST_MAX) {
            memmove(buf + at + len, buf + at, n - at);
            memcpy(buf + at, t, len);
            n += len;
          }
          break;
        }
        case 3: /* truncate */
          n = at;
          break;
        default: /* duplicate a line-sized chunk */
          if (at < n && n + 16 < CONTROL_REQUEST_MAX) {
            size_t len = 1 + rnd() % 16;
            if (at + len > n)
              len = n - at;
            memmove(buf + at + len, buf + at, n - at);
            n += len;
          }
          break;
        }
      }
    }
    /* What the server hands the parser: the bytes up to the first complete message... or all. */
    CHECK(control_msg_complete(buf, n) <= n);
    memcpy(copy, buf, n);
    err[0] = '\0';
    ret = control_request_parse(copy, n, &r, err, sizeof(err));
    if (ret) {
      refused++;
      if ((ret != -EINVAL && ret != -EPROTO) || !err[0])
        bad++;
      continue;
    }
    accepted++;
    {
      int m = control_request_write(&r, out, sizeof(out));
      if (m < 0 || control_request_parse(out, (size_t)m, &back, err, sizeof(err)) ||
          back.cmd != r.cmd || back.duration_ns != r.duration_ns || back.gpu_only != r.gpu_only ||
          back.format != r.format || strcmp(back.output_dir, r.output_dir))
        bad++;
    }
  }
  fprintf(stderr, "fuzz: %d accepted, %d refused\n", accepted, refused);
  CHECK_EQ(bad, 0);
  /* The mutations must exercise both outcomes, or the fuzz tests nothing. */
  CHECK(accepted > 1000);
  CHECK(refused > 100000);
}

int main(void)
{
  RUN(test_valid_requests);
  RUN(test_malformed_requests);
  RUN(test_nul_and_limits);
  RUN(test_complete);
  RUN(test_write_roundtrip);
  RUN(test_writer_and_reply);
  RUN(test_u64);
  RUN(test_defaults_agree);
  RUN(test_fuzz);
  UNIT_EXIT();
}
