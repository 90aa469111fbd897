/* The pprof builder's label ids and sample encoding: same profile, same bytes as Sample. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "export/pprof.h"
#include "proto/profile.pb-c.h"

#include "tests/pprof/pprof_check.h"

#define STACKS 300
#define KERNELS 4

static const struct pprof_label gpu0 = {"gpu", "0", 0, NULL}, gpu1 = {"gpu", "1", 0, NULL};
static const struct pprof_label bytes = {"bytes", NULL, 4096, "bytes"};
static const struct pprof_label zero = {"zero", NULL, 0, NULL}; /* num 0: only the key */

/* STACKS stacks x KERNELS kernels, each sample labelled gpu 0/1, bytes and zero; by_id: the
 * labels passed as ids, else as strings. */
static int build(struct pprof_builder *b, int by_id)
{
  uint64_t locs[4], ids[3] = {0};
  char name[64];
  int ret = 0;

  pprof_builder_add_sample_type(b, "launches", "count");
  pprof_builder_add_sample_type(b, "gpu_time", "nanoseconds");
  pprof_builder_set_period(b, "gpu_time", "nanoseconds", 1);
  pprof_builder_set_time(b, 1700000000000000000ll, 1000000000ll);
  for (unsigned s = 0; s < STACKS; s++) {
    for (unsigned d = 1; d < 4; d++) {
      snprintf(name, sizeof(name), "f%u_%u", d, d == 3 ? 0 : s % (d * 40));
      locs[d] =
          pprof_builder_location(b, 0, 0, pprof_builder_function(b, name, name, "m.py", 0), 0);
    }
    for (unsigned k = 0; k < KERNELS; k++) {
      const struct pprof_label l[3] = {k & 1 ? gpu1 : gpu0, bytes, zero};
      int64_t v[2] = {1 + k, 1000 * (int64_t)s + k};

      snprintf(name, sizeof(name), "[gpu] k%u", k);
      locs[0] = pprof_builder_location(b, 0, 0, pprof_builder_function(b, name, name, NULL, 0), 0);
      if (by_id) {
        for (int i = 0; i < 3; i++)
          ids[i] = pprof_builder_label(b, &l[i]);
        ret |= pprof_builder_add_sample_labels(b, locs, 4, v, 2, ids, 3);
      } else {
        ret |= pprof_builder_add_sample(b, locs, 4, v, 2, l, 3);
      }
    }
  }
  return ret;
}

static uint64_t varint(const uint8_t *p, size_t *i)
{
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    uint8_t c = p[(*i)++];
    v |= (uint64_t)(c & 0x7f) << shift;
    if (!(c & 0x80))
      break;
  }
  return v;
}

/* The Profile's `sample` fields (tag, length and all) concatenated, as written. */
static size_t sample_fields(const uint8_t *raw, size_t len, uint8_t *out)
{
  size_t i = 0, n = 0;

  while (i < len) {
    size_t start = i;
    uint64_t tag = varint(raw, &i);

    if ((tag & 7) == 0) {
      varint(raw, &i);
    } else if ((tag & 7) == 2) {
      i += varint(raw, &i);
    } else {
      CHECK(!"unexpected wire type");
      return 0;
    }
    if (tag >> 3 == 2) {
      memcpy(out + n, raw + start, i - start);
      n += i - start;
    }
  }
  return n;
}

int main(void)
{
  struct pprof_builder *a = pprof_builder_new(), *b = pprof_builder_new();
  uint8_t *gz_a = NULL, *gz_b = NULL, *raw = NULL, *written = NULL, *full = NULL;
  size_t len_a = 0, len_b = 0, raw_len = 0, n_written, n_full;
  Perftools__Profiles__Profile *p = NULL, only = PERFTOOLS__PROFILES__PROFILE__INIT;
  uint64_t id0, id1, bad[1];
  int64_t v[2] = {1, 1};

  if (!a || !b)
    return 1;
  /* Interned: the same label twice is one id; ids are dense from 1. */
  id0 = pprof_builder_label(a, &gpu0);
  id1 = pprof_builder_label(a, &gpu1);
  CHECK(id0 == 1 && id1 == 2 && pprof_builder_label(a, &gpu0) == id0);
  CHECK(pprof_builder_label(a, &bytes) == 3 && pprof_builder_label(a, &zero) == 4);
  /* b interns the same strings first too, so that both string tables are in the same order. */
  CHECK(pprof_builder_label(b, &gpu0) == 1 && pprof_builder_label(b, &gpu1) == 2);
  CHECK(pprof_builder_label(b, &bytes) == 3 && pprof_builder_label(b, &zero) == 4);
  CHECK(build(a, 1) == 0);
  CHECK(build(b, 0) == 0);
  CHECK(pprof_builder_sample_count(a) == STACKS * KERNELS);
  /* Unknown label ids are refused and add nothing. */
  {
    uint64_t loc = 1;
    bad[0] = 0;
    CHECK(pprof_builder_add_sample_labels(a, &loc, 1, v, 2, bad, 1) == -22);
    bad[0] = 5;
    CHECK(pprof_builder_add_sample_labels(a, &loc, 1, v, 2, bad, 1) == -22);
    CHECK(pprof_builder_sample_count(a) == STACKS * KERNELS);
  }
  CHECK(pprof_builder_encode(a, 1, &gz_a, &len_a) == 0);
  CHECK(pprof_builder_encode(b, 1, &gz_b, &len_b) == 0);
  /* Labels by id or by string: the same profile, byte for byte (interned in the same order). */
  CHECK(len_a == len_b && len_a && !memcmp(gz_a, gz_b, len_a));
  raw = gunzip_profile(gz_a, len_a, 16u << 20, &raw_len);
  p = raw && raw_len ? perftools__profiles__profile__unpack(NULL, raw_len, raw) : NULL;
  CHECK(p != NULL);
  if (!p)
    goto out;
  CHECK(p->n_sample == STACKS * KERNELS);
  for (size_t i = 0; i < p->n_sample && i < STACKS * KERNELS; i++) {
    const Perftools__Profiles__Sample *s = p->sample[i];
    CHECK(s->n_label == 3 && s->n_value == 2 && s->n_location_id == 4);
    if (s->n_label != 3)
      break;
    CHECK(!strcmp(p->string_table[s->label[0]->key], "gpu") &&
          !strcmp(p->string_table[s->label[0]->str], i % KERNELS & 1 ? "1" : "0") &&
          s->label[0]->num == 0 && s->label[0]->num_unit == 0);
    CHECK(!strcmp(p->string_table[s->label[1]->key], "bytes") && s->label[1]->str == 0 &&
          s->label[1]->num == 4096 && !strcmp(p->string_table[s->label[1]->num_unit], "bytes"));
    CHECK(!strcmp(p->string_table[s->label[2]->key], "zero") && s->label[2]->str == 0 &&
          s->label[2]->num == 0 && s->label[2]->num_unit == 0);
    CHECK(s->value[0] == 1 + (int64_t)(i % KERNELS) &&
          s->value[1] == 1000 * (int64_t)(i / KERNELS) + (int64_t)(i % KERNELS));
    /* Location ids, leaf first, as added: each stack's KERNELS samples are a run (export/pprof.c
     * writes the ids after the leaf once per run). */
    for (size_t d = 0; d < s->n_location_id && d < 4; d++) {
      const Perftools__Profiles__Location *l = NULL;
      char want[64];

      for (size_t k = 0; k < p->n_location && !l; k++)
        if (p->location[k]->id == s->location_id[d])
          l = p->location[k];
      CHECK(l && l->n_line == 1 && l->line[0]->function_id >= 1 &&
            l->line[0]->function_id <= p->n_function);
      if (!l || l->n_line != 1 || !l->line[0]->function_id ||
          l->line[0]->function_id > p->n_function)
        break;
      if (d == 0)
        snprintf(want, sizeof(want), "[gpu] k%u", (unsigned)(i % KERNELS));
      else
        snprintf(want, sizeof(want), "f%u_%u", (unsigned)d,
                 d == 3 ? 0 : (unsigned)(i / KERNELS) % ((unsigned)d * 40));
      CHECK(!strcmp(p->string_table[p->function[l->line[0]->function_id - 1]->name], want));
    }
  }
  /* The samples as written (lean views: uint32 ids, labels packed once as bytes, a run's ids
   * after the leaf packed once) are the bytes protobuf-c writes for the same samples as the
   * schema's Profile.sample. */
  written = malloc(raw_len);
  n_written = written ? sample_fields(raw, raw_len, written) : 0;
  only.n_sample = p->n_sample;
  only.sample = p->sample;
  n_full = perftools__profiles__profile__get_packed_size(&only);
  full = malloc(n_full);
  CHECK(written && full && n_written > 0);
  if (full)
    CHECK(perftools__profiles__profile__pack(&only, full) == n_full);
  CHECK(full && n_written == n_full && !memcmp(written, full, n_full));
out:
  if (p)
    perftools__profiles__profile__free_unpacked(p, NULL);
  free(raw);
  free(written);
  free(full);
  free(gz_a);
  free(gz_b);
  pprof_builder_free(a);
  pprof_builder_free(b);
  if (failures)
    fprintf(stderr, "pprof_label_ids_test: %d check(s) failed\n", failures);
  else
    printf("pprof_label_ids_test: ok\n");
  return failures ? 1 : 0;
}
