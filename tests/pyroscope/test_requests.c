/* Unit tests of export/pyroscope.c: series names, label rules, /ingest names, the /push body. */
#include <errno.h>
#include <string.h>

#include "../unit/unit.h"
#include "export/pyroscope.h"
#include "proto/push.pb-c.h"

static void test_series_names(void)
{
  CHECK_STR(pyroscope_series_name("gpu_time"), "gpu");
  CHECK_STR(pyroscope_series_name("gpu_memory"), "gpu_memory");
  CHECK_STR(pyroscope_series_name("memcpy"), "gpu_memcpy");
  CHECK_STR(pyroscope_series_name("nccl"), "gpu_nccl");
  CHECK(pyroscope_series_name("cpu") == NULL);
  CHECK(pyroscope_series_name(NULL) == NULL);
}

static void test_label_names(void)
{
  CHECK(pyroscope_label_name_valid("service_name"));
  CHECK(pyroscope_label_name_valid("__name__"));
  CHECK(pyroscope_label_name_valid("k8s.pod"));
  CHECK(pyroscope_label_name_valid("_x9"));
  CHECK(!pyroscope_label_name_valid(""));
  CHECK(!pyroscope_label_name_valid("9lives"));
  CHECK(!pyroscope_label_name_valid("bad-key"));
  CHECK(!pyroscope_label_name_valid(".dot"));
  CHECK(!pyroscope_label_name_valid("a b"));
}

static void test_labels_add(void)
{
  struct pyroscope_labels ls = {0};
  char name[16], big[PYROSCOPE_MAX_VALUE + 2];

  CHECK_EQ(pyroscope_labels_add(&ls, "service_name", "app"), 0);
  CHECK_EQ(pyroscope_labels_add(&ls, "service_name", "other"), (unsigned long long)-EEXIST);
  CHECK_STR(pyroscope_labels_get(&ls, "service_name"), "app");
  CHECK_EQ(pyroscope_labels_add(&ls, "bad-key", "v"), (unsigned long long)-EINVAL);
  /* Pyroscope reads '.' in a name as '_': "k8s.pod" and "k8s_pod" would be one label. */
  CHECK_EQ(pyroscope_labels_add(&ls, "k8s.pod", "a"), 0);
  CHECK_EQ(pyroscope_labels_add(&ls, "k8s_pod", "b"), (unsigned long long)-EEXIST);
  CHECK_EQ(pyroscope_labels_add(&ls, "k8s.po", "b"), 0);
  pyroscope_labels_pop(&ls);
  pyroscope_labels_pop(&ls);
  /* Latin-1 and a truncated sequence become '?'; valid UTF-8 stays as it is. */
  CHECK_EQ(pyroscope_labels_add(&ls, "team", "\xe9t\xe9-\xc3\xa9-\xe2\x82"), 0);
  CHECK_STR(pyroscope_labels_get(&ls, "team"), "?t?-\xc3\xa9-??");
  memset(big, 'v', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  CHECK_EQ(pyroscope_labels_add(&ls, "big", big), (unsigned long long)-EINVAL);
  big[PYROSCOPE_MAX_VALUE] = '\0';
  CHECK_EQ(pyroscope_labels_add(&ls, "big", big), 0);
  for (int i = 0; ls.n < PYROSCOPE_MAX_LABELS; i++) {
    snprintf(name, sizeof(name), "l%d", i);
    CHECK_EQ(pyroscope_labels_add(&ls, name, "x"), 0);
  }
  CHECK_EQ(pyroscope_labels_add(&ls, "one_more", "x"), (unsigned long long)-E2BIG);
  CHECK_EQ(ls.n, PYROSCOPE_MAX_LABELS);
  pyroscope_labels_clear(&ls);
  CHECK_EQ(ls.n, 0);
}

static void test_ingest_name(void)
{
  struct pyroscope_labels ls = {0};
  char buf[256];

  pyroscope_labels_add(&ls, "__name__", "gpu");
  pyroscope_labels_add(&ls, "__delta__", "false");
  pyroscope_labels_add(&ls, "service_name", "my-app/v1.2");
  pyroscope_labels_add(&ls, "env", "prod");
  pyroscope_labels_add(&ls, "pod", "trainer-0");
  CHECK_EQ(pyroscope_ingest_name(&ls, buf, sizeof(buf)), 0);
  CHECK_STR(buf, "my-app/v1.2{env=prod,pod=trainer-0}");
  CHECK_EQ(pyroscope_ingest_name(&ls, buf, 10), (unsigned long long)-ENOSPC);
  pyroscope_labels_add(&ls, "bad", "a,b");
  CHECK_EQ(pyroscope_ingest_name(&ls, buf, sizeof(buf)), (unsigned long long)-EINVAL);
  pyroscope_labels_clear(&ls);

  pyroscope_labels_add(&ls, "service_name", "has space");
  CHECK_EQ(pyroscope_ingest_name(&ls, buf, sizeof(buf)), (unsigned long long)-EINVAL);
  pyroscope_labels_clear(&ls);

  pyroscope_labels_add(&ls, "service_name", "bare");
  CHECK_EQ(pyroscope_ingest_name(&ls, buf, sizeof(buf)), 0);
  CHECK_STR(buf, "bare{}");
  pyroscope_labels_clear(&ls);
}

/* The request URL's limit, to the byte: base + "/ingest?name=" + escaped name + the rest of
 * the query with 20-digit from/until (69 bytes) must stay under PYROSCOPE_URL_MAX. */
static void test_ingest_fits(void)
{
  static char base[PYROSCOPE_URL_MAX], value[2001];
  struct pyroscope_labels ls = {0};
  size_t b;

  memset(value, 'x', 2000);
  pyroscope_labels_add(&ls, "__name__", "gpu");
  pyroscope_labels_add(&ls, "service_name", "a");
  pyroscope_labels_add(&ls, "k", value);
  /* "a{k=x...x}" escapes '{' '=' '}': 2011 bytes; 13 + 2011 + 69 = 2093 besides the base. */
  b = PYROSCOPE_URL_MAX - 2093 - 1;
  memcpy(base, "http://h/", 9);
  memset(base + 9, 'p', b - 9);
  CHECK_EQ(pyroscope_ingest_fits(&ls, base), 0);
  base[b] = '/'; /* a trailing '/' is not sent */
  CHECK_EQ(pyroscope_ingest_fits(&ls, base), 0);
  base[b] = 'p';
  CHECK_EQ(pyroscope_ingest_fits(&ls, base), (unsigned long long)-ENOSPC);
  /* The name alone is limited too: two long values pass PYROSCOPE_INGEST_NAME_MAX. */
  pyroscope_labels_add(&ls, "l", value);
  CHECK_EQ(pyroscope_ingest_fits(&ls, "http://h"), 0);
  pyroscope_labels_add(&ls, "m", value);
  CHECK_EQ(pyroscope_ingest_fits(&ls, "http://h"), (unsigned long long)-ENOSPC);
  pyroscope_labels_pop(&ls);
  CHECK_EQ(ls.n, 4);
  CHECK_EQ(pyroscope_ingest_fits(&ls, "http://h"), 0);
  pyroscope_labels_add(&ls, "bad", "a=b");
  CHECK_EQ(pyroscope_ingest_fits(&ls, "http://h"), (unsigned long long)-EINVAL);
  pyroscope_labels_clear(&ls);
  pyroscope_labels_pop(&ls); /* empty: nothing */
  CHECK_EQ(ls.n, 0);
}

/* The body decodes, with the generated code, to exactly one series with our labels and bytes. */
static void test_push_body(void)
{
  static const uint8_t prof[] = {0x1f, 0x8b, 1, 2, 3, 0, 4};
  struct pyroscope_labels ls = {0};
  Gpuprof__Push__PushRequest *req;
  uint8_t *body;
  size_t len;

  CHECK_EQ(pyroscope_push_body(&ls, prof, sizeof(prof), &body, &len), (unsigned long long)-EINVAL);
  pyroscope_labels_add(&ls, "__name__", "gpu_memory");
  pyroscope_labels_add(&ls, "service_name", "svc");
  CHECK_EQ(pyroscope_push_body(&ls, prof, sizeof(prof), &body, &len), 0);
  req = gpuprof__push__push_request__unpack(NULL, len, body);
  CHECK(req != NULL);
  if (req) {
    CHECK_EQ(req->n_series, 1);
    CHECK_EQ(req->series[0]->n_labels, 2);
    CHECK_STR(req->series[0]->labels[0]->name, "__name__");
    CHECK_STR(req->series[0]->labels[0]->value, "gpu_memory");
    CHECK_STR(req->series[0]->labels[1]->name, "service_name");
    CHECK_STR(req->series[0]->labels[1]->value, "svc");
    CHECK_EQ(req->series[0]->n_samples, 1);
    CHECK_EQ(req->series[0]->samples[0]->raw_profile.len, sizeof(prof));
    CHECK(!memcmp(req->series[0]->samples[0]->raw_profile.data, prof, sizeof(prof)));
    gpuprof__push__push_request__free_unpacked(req, NULL);
  }
  /* Wire bytes of the first field: series (1, length-delimited), then labels (1, LEN). */
  CHECK_EQ(body[0], 0x0a);
  free(body);
  pyroscope_labels_clear(&ls);
}

/* What log lines show of a URL: never its credentials or query. */
static void test_url_for_log(void)
{
  char buf[128];

  pyroscope_url_for_log("http://pyroscope:4040/", buf, sizeof(buf));
  CHECK_STR(buf, "http://pyroscope:4040/");
  pyroscope_url_for_log("https://123:tok@en@host.example/p/q?token=x#f", buf, sizeof(buf));
  CHECK_STR(buf, "https://***@host.example/p/q?***");
  pyroscope_url_for_log("http://user@host", buf, sizeof(buf));
  CHECK_STR(buf, "http://***@host");
  pyroscope_url_for_log("http://host/a@b", buf, sizeof(buf)); /* '@' in the path: no userinfo */
  CHECK_STR(buf, "http://host/a@b");
  pyroscope_url_for_log("u:secret@host", buf, sizeof(buf));
  CHECK_STR(buf, "***@host");
  pyroscope_url_for_log("http://u:secret@host", buf, 10);
  CHECK_STR(buf, "http://**");
}

int main(void)
{
  RUN(test_series_names);
  RUN(test_label_names);
  RUN(test_labels_add);
  RUN(test_ingest_name);
  RUN(test_ingest_fits);
  RUN(test_push_body);
  RUN(test_url_for_log);
  UNIT_EXIT();
}
