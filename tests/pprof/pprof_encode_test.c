/* The pprof encoder at scale: batches, staging, renumbered location ids, decoded back. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "export/pprof.h"
#include "proto/profile.pb-c.h"

#include "tests/pprof/pprof_check.h"

#define STACKS 2000
#define KERNELS 3
#define DEPTH 30
#define FRAMES 20000           /* frame ids: location ids past 16383 take 3-byte varints */
#define MAPPINGS 300           /* more than one batch of mappings */
#define MANY_LABELS 1500       /* one sample with more labels than a batch holds */
#define LONG_NAME (300u << 10) /* one string longer than the staging buffer */

static char *long_name;
static size_t n_frames; /* distinct frames the stacks use */

/* Frame d of stack s: shared outer frames, distinct inner ones (a call tree). */
static unsigned frame_of(unsigned s, unsigned d)
{
  return d >= DEPTH - 5 ? d - (DEPTH - 5) : 5 + (s * (DEPTH - 5) + d) % (FRAMES - 5);
}

static void frame_name(unsigned f, char *buf, size_t len)
{
  snprintf(buf, len, "module.function_%u", f);
}

static void build(struct pprof_builder *b)
{
  uint64_t frame_loc[FRAMES] = {0}, locs[DEPTH + 1], maps[MAPPINGS];
  struct pprof_label labels[MANY_LABELS];
  char name[64], keys[MANY_LABELS][16];

  CHECK(pprof_builder_add_sample_type(b, "launches", "count") == 0);
  CHECK(pprof_builder_add_sample_type(b, "gpu_time", "nanoseconds") == 0);
  pprof_builder_set_period(b, "gpu_time", "nanoseconds", 1);
  pprof_builder_set_default_sample_type(b, "gpu_time");
  pprof_builder_set_time(b, 1700000000000000000ll, 15000000000ll);
  for (unsigned m = 0; m < MAPPINGS; m++) {
    struct pprof_mapping pm = {0x100000ull * (m + 1), 0x100000ull * (m + 2), 0, NULL, NULL, 1};
    snprintf(name, sizeof(name), "/lib/lib%u.so", m);
    pm.filename = name;
    maps[m] = pprof_builder_add_mapping(b, &pm);
    CHECK(maps[m] == m + 1);
  }
  for (unsigned s = 0; s < STACKS; s++) {
    for (unsigned d = 0; d < DEPTH; d++) {
      unsigned f = frame_of(s, d);
      if (!frame_loc[f]) {
        n_frames++;
        frame_name(f, name, sizeof(name));
        frame_loc[f] = pprof_builder_location(b, maps[f % MAPPINGS], 0x100000ull + f * 16,
                                              pprof_builder_function(b, name, name, "m.py", 0), 0);
      }
      locs[d + 1] = frame_loc[f];
    }
    for (unsigned k = 0; k < KERNELS; k++) {
      struct pprof_label l[2] = {{"gpu", k & 1 ? "1" : "0", 0, NULL}, {"bytes", NULL, s, "bytes"}};
      int64_t v[2] = {1 + k, 1000 * s + k};
      snprintf(name, sizeof(name), "[gpu] kernel_%u", k);
      locs[0] = pprof_builder_location(b, 0, 0, pprof_builder_function(b, name, name, NULL, 0), 0);
      CHECK(pprof_builder_add_sample(b, locs, DEPTH + 1, v, 2, l, 2) == 0);
    }
  }
  /* One sample with a very long leaf name and many labels. */
  for (unsigned i = 0; i < MANY_LABELS; i++) {
    snprintf(keys[i], sizeof(keys[i]), "k%u", i);
    labels[i] = (struct pprof_label){keys[i], NULL, (int64_t)i, NULL};
  }
  locs[0] =
      pprof_builder_location(b, 0, 0, pprof_builder_function(b, long_name, long_name, NULL, 0), 0);
  {
    int64_t v[2] = {7, 7000};
    CHECK(pprof_builder_add_sample(b, locs, 1, v, 2, labels, MANY_LABELS) == 0);
  }
  CHECK(pprof_builder_add_comment(b, "pprof_encode_test") == 0);
}

static Perftools__Profiles__Profile *decode(const uint8_t *gz, size_t len)
{
  size_t n;
  uint8_t *raw = gunzip_profile(gz, len, 64u << 20, &n);
  Perftools__Profiles__Profile *p = n ? perftools__profiles__profile__unpack(NULL, n, raw) : NULL;

  free(raw);
  return p;
}

/* Checks everything build() put in, through the decoded ids. */
static void check(const Perftools__Profiles__Profile *p)
{
  Perftools__Profiles__Location **loc_by_id;
  Perftools__Profiles__Function **fn_by_id;
  uint64_t max_uses = 0, uses_of_1 = 0, *uses;
  char name[64];
  size_t i;

  CHECK(p->n_string_table > 0 && !strcmp(p->string_table[0], ""));
  CHECK(p->n_sample_type == 2 && !strcmp(p->string_table[p->sample_type[1]->type], "gpu_time"));
  CHECK(p->time_nanos == 1700000000000000000ll && p->duration_nanos == 15000000000ll);
  CHECK(p->n_comment == 1 && !strcmp(p->string_table[p->comment[0]], "pprof_encode_test"));
  CHECK(p->n_mapping == MAPPINGS);
  for (i = 0; i < p->n_mapping; i++) {
    snprintf(name, sizeof(name), "/lib/lib%zu.so", i);
    CHECK(p->mapping[i]->id == i + 1 && !strcmp(p->string_table[p->mapping[i]->filename], name));
  }
  CHECK(p->n_sample == STACKS * KERNELS + 1);
  CHECK(n_frames == FRAMES);
  CHECK(p->n_function == n_frames + KERNELS + 1 && p->n_location == n_frames + KERNELS + 1);
  if (p->n_location != n_frames + KERNELS + 1 || p->n_function != n_frames + KERNELS + 1 ||
      p->n_sample != STACKS * KERNELS + 1)
    return;
  loc_by_id = calloc(p->n_location + 1, sizeof(*loc_by_id));
  fn_by_id = calloc(p->n_function + 1, sizeof(*fn_by_id));
  uses = calloc(p->n_location + 1, sizeof(*uses));
  /* Ids dense 1..N, each once. */
  for (i = 0; i < p->n_location; i++) {
    uint64_t id = p->location[i]->id;
    CHECK(id >= 1 && id <= p->n_location && !loc_by_id[id]);
    if (id >= 1 && id <= p->n_location)
      loc_by_id[id] = p->location[i];
  }
  for (i = 0; i < p->n_function; i++) {
    uint64_t id = p->function[i]->id;
    CHECK(id == i + 1);
    fn_by_id[i + 1] = p->function[i];
  }
  for (i = 0; i < STACKS * KERNELS; i++) {
    const Perftools__Profiles__Sample *s = p->sample[i];
    unsigned st = (unsigned)(i / KERNELS), k = (unsigned)(i % KERNELS);
    CHECK(s->n_location_id == DEPTH + 1 && s->n_value == 2 && s->n_label == 2);
    if (s->n_location_id != DEPTH + 1 || s->n_value != 2 || s->n_label != 2)
      break;
    CHECK(s->value[0] == 1 + k && s->value[1] == 1000 * st + k);
    CHECK(!strcmp(p->string_table[s->label[0]->key], "gpu") &&
          !strcmp(p->string_table[s->label[0]->str], k & 1 ? "1" : "0"));
    CHECK(!strcmp(p->string_table[s->label[1]->key], "bytes") && s->label[1]->num == st &&
          !strcmp(p->string_table[s->label[1]->num_unit], "bytes"));
    for (size_t d = 0; d < s->n_location_id; d++) {
      const Perftools__Profiles__Location *l = loc_by_id[s->location_id[d]];
      const Perftools__Profiles__Function *f =
          l && l->n_line ? fn_by_id[l->line[0]->function_id] : NULL;
      if (d)
        frame_name(frame_of(st, (unsigned)d - 1), name, sizeof(name));
      else
        snprintf(name, sizeof(name), "[gpu] kernel_%u", k);
      CHECK(f && !strcmp(p->string_table[f->name], name));
      if (!f || strcmp(p->string_table[f->name], name))
        goto out;
      if (d) {
        unsigned fr = frame_of(st, (unsigned)d - 1);
        CHECK(l->address == 0x100000ull + fr * 16 && l->mapping_id == fr % MAPPINGS + 1);
      }
      uses[s->location_id[d]]++;
    }
  }
  {
    const Perftools__Profiles__Sample *s = p->sample[STACKS * KERNELS];
    const Perftools__Profiles__Location *l = loc_by_id[s->location_id[0]];
    CHECK(s->n_label == MANY_LABELS && s->label[MANY_LABELS - 1]->num == MANY_LABELS - 1);
    CHECK(l && l->n_line &&
          !strcmp(p->string_table[fn_by_id[l->line[0]->function_id]->name], long_name));
    uses[s->location_id[0]]++;
  }
  /* The most used location has id 1 (the shortest varint). */
  for (i = 1; i <= p->n_location; i++)
    if (uses[i] > max_uses)
      max_uses = uses[i];
  uses_of_1 = uses[1];
  CHECK(uses_of_1 == max_uses && max_uses == STACKS * KERNELS);
out:
  free(loc_by_id);
  free(fn_by_id);
  free(uses);
}

int main(void)
{
  struct pprof_builder *b = pprof_builder_new(), *fresh = pprof_builder_new();
  int levels[] = {0, 1, 6};
  uint8_t *buf = NULL, *buf2 = NULL;
  size_t len = 0, len2 = 0;

  long_name = malloc(LONG_NAME + 1);
  if (!b || !fresh || !long_name)
    return 2;
  for (size_t i = 0; i < LONG_NAME; i++)
    long_name[i] = (char)('a' + i * 7 % 26);
  long_name[LONG_NAME] = '\0';

  /* Every level, the builder reset and reused between them. */
  for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
    Perftools__Profiles__Profile *p;
    pprof_builder_reset(b);
    n_frames = 0;
    build(b);
    CHECK(pprof_builder_encode(b, levels[i], &buf, &len) == 0);
    p = buf ? decode(buf, len) : NULL;
    CHECK(p != NULL);
    if (p)
      check(p);
    perftools__profiles__profile__free_unpacked(p, NULL);
    free(buf);
    buf = NULL;
  }

  /* A small profile after the large one encodes to the same bytes as from a fresh builder. */
  pprof_builder_reset(b);
  {
    uint64_t l;
    int64_t v = 5;
    CHECK(pprof_builder_add_sample_type(b, "n", "count") == 0);
    CHECK(pprof_builder_add_sample_type(fresh, "n", "count") == 0);
    l = pprof_builder_location(b, 0, 0, pprof_builder_function(b, "f", "f", NULL, 0), 0);
    CHECK(pprof_builder_add_sample(b, &l, 1, &v, 1, NULL, 0) == 0);
    l = pprof_builder_location(fresh, 0, 0, pprof_builder_function(fresh, "f", "f", NULL, 0), 0);
    CHECK(pprof_builder_add_sample(fresh, &l, 1, &v, 1, NULL, 0) == 0);
  }
  CHECK(pprof_builder_encode(b, 1, &buf, &len) == 0);
  CHECK(pprof_builder_encode(fresh, 1, &buf2, &len2) == 0);
  CHECK(buf && buf2 && len == len2 && !memcmp(buf, buf2, len));
  free(buf);
  free(buf2);

  /* A sample type added after samples would leave them a value short (the encoder reads each
   * sample's values at index * types): refused, and the profile stays as it was. */
  pprof_builder_reset(b);
  {
    uint64_t l;
    int64_t v = 9;
    Perftools__Profiles__Profile *p;
    CHECK(pprof_builder_add_sample_type(b, "n", "count") == 0);
    l = pprof_builder_location(b, 0, 0, pprof_builder_function(b, "f", "f", NULL, 0), 0);
    CHECK(pprof_builder_add_sample(b, &l, 1, &v, 1, NULL, 0) == 0);
    CHECK(pprof_builder_add_sample_type(b, "late", "count") == -EINVAL);
    CHECK(pprof_builder_add_sample(b, &l, 1, &v, 1, NULL, 0) == 0);
    CHECK(pprof_builder_encode(b, 1, &buf, &len) == 0);
    p = buf ? decode(buf, len) : NULL;
    CHECK(p && p->n_sample_type == 1 && p->n_sample == 2);
    if (p && p->n_sample == 2)
      CHECK(p->sample[0]->n_value == 1 && p->sample[0]->value[0] == 9 &&
            p->sample[1]->n_value == 1 && p->sample[1]->value[0] == 9);
    perftools__profiles__profile__free_unpacked(p, NULL);
    free(buf);
  }

  /* An empty profile is valid: string_table[0] only. */
  pprof_builder_reset(b);
  CHECK(pprof_builder_encode(b, 1, &buf, &len) == 0);
  {
    Perftools__Profiles__Profile *p = buf ? decode(buf, len) : NULL;
    CHECK(p && p->n_sample == 0 && p->n_string_table == 1);
    perftools__profiles__profile__free_unpacked(p, NULL);
  }
  free(buf);

  pprof_builder_free(b);
  pprof_builder_free(fresh);
  free(long_name);
  if (failures)
    return 1;
  printf("pprof_encode_test: ok\n");
  return 0;
}
