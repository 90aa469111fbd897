/* Random profiles through the builder, decoded as a whole Profile and compared to a model. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export/pprof.h"
#include "export/utf8.h"
#include "proto/profile.pb-c.h"

#include "tests/pprof/pprof_check.h"

#define MAX_FN 400
#define MAX_LOC 2000
#define MAX_DEPTH 80 /* past 64 two-byte ids: a location_id field of 128 bytes or more */
#define MAX_LABELS 4

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static unsigned below(unsigned n)
{
  return (unsigned)(rnd() % n);
}

/* A random name from a small pool (so some repeat), sometimes not UTF-8, sometimes long. */
static void rnd_name(char *buf, size_t cap, const char *prefix)
{
  static const char *odd[] = {"caf\xc3\xa9", "\xff\xfe",   "a\xed\xa0\x80z",     "\xf4\x90\x80\x80",
                              "\xe2\x82",    "x\xc0\xafy", "\xf0\x9f\x98\x80ok", ""};
  unsigned k = below(10);

  if (k == 0)
    snprintf(buf, cap, "%s", odd[below(8)]);
  else if (k == 1 && cap > 3000) {
    size_t n = 1000 + below(2000);
    memset(buf, 'L', n);
    buf[n] = '\0';
    buf[below((unsigned)n)] = (char)(below(2) ? 0xc3 : 'q');
  } else
    snprintf(buf, cap, "%s%u", prefix, below(300));
}

/* What the builder must turn s into: NULL and "" are index 0, invalid bytes become '?'. */
static void expect_str(char *dst, size_t cap, const char *s)
{
  snprintf(dst, cap, "%s", s ? s : "");
  utf8_fix(dst);
}

struct fn {
  char name[3200], sys[64], file[64];
};
struct loc {
  uint64_t mapping, address;
  unsigned fn; /* index + 1 into fns, 0 = none */
  int64_t line;
};
struct sample {
  uint64_t locs[MAX_DEPTH];
  size_t n_locs;
  int64_t values[3];
  struct pprof_label labels[MAX_LABELS];
  char label_key[MAX_LABELS][16], label_str[MAX_LABELS][16], label_unit[MAX_LABELS][16];
  size_t n_labels;
};

static struct fn fns[MAX_FN];
static uint64_t fn_ids[MAX_FN];
static struct loc locs[MAX_LOC];
static uint64_t loc_ids[MAX_LOC];
static struct sample samples[3000];

static const char *str_of(const Perftools__Profiles__Profile *p, int64_t i)
{
  if (i < 0 || (size_t)i >= p->n_string_table) {
    CHECK(!"string index in range");
    return "";
  }
  return p->string_table[i];
}

static void one_round(struct pprof_builder *b, unsigned round, unsigned n_types)
{
  unsigned n_fn = 1 + below(MAX_FN), n_loc = 1 + below(MAX_LOC), n_map = below(4), n_samples;
  Perftools__Profiles__Profile *p;
  uint8_t *gz = NULL, *raw;
  size_t len = 0, rawlen;
  const Perftools__Profiles__Location **loc_by_id = NULL;
  char want[3200];

  pprof_builder_reset(b);
  for (unsigned t = 0; t < n_types; t++) {
    char tn[16];
    snprintf(tn, sizeof(tn), "type%u", t);
    CHECK(pprof_builder_add_sample_type(b, tn, t ? "bytes" : "count") == 0);
  }
  pprof_builder_set_period(b, "type0", "count", (int64_t)round);
  pprof_builder_set_default_sample_type(b, n_types > 1 ? "type1" : "type0");
  pprof_builder_set_time(b, (int64_t)round * 1000000007, 5);
  for (unsigned m = 0; m < n_map; m++) {
    struct pprof_mapping pm = {m * 0x1000ull, (m + 1) * 0x1000ull, m, "/lib/x.so", NULL, 1};
    CHECK(pprof_builder_add_mapping(b, &pm) == m + 1);
  }
  for (unsigned f = 0; f < n_fn; f++) {
    rnd_name(fns[f].name, sizeof(fns[f].name), "fn");
    rnd_name(fns[f].sys, sizeof(fns[f].sys), "sys");
    rnd_name(fns[f].file, sizeof(fns[f].file), "file");
    fn_ids[f] = pprof_builder_function(b, fns[f].name, fns[f].sys, fns[f].file, 7);
    CHECK(fn_ids[f] >= 1);
  }
  for (unsigned l = 0; l < n_loc; l++) {
    locs[l].mapping = below(n_map + 1);
    locs[l].address = below(50);
    locs[l].fn = below(n_fn + 1);
    locs[l].line = (int64_t)below(5) - 2;
    loc_ids[l] = pprof_builder_location(b, locs[l].mapping, locs[l].address,
                                        locs[l].fn ? fn_ids[locs[l].fn - 1] : 0, locs[l].line);
    CHECK(loc_ids[l] >= 1);
  }
  n_samples = below(sizeof(samples) / sizeof(samples[0]));
  for (unsigned i = 0; i < n_samples; i++) {
    struct sample *s = &samples[i];
    unsigned shape = i ? below(6) : 0;

    /* Half the samples repeat the stack before but the leaf, as the agent's kernels of one
     * stack do (the encoder writes such runs in pieces); some of those change one more frame
     * or the depth, or keep the leaf too. */
    if (shape >= 3) {
      *s = samples[i - 1];
      s->locs[0] = loc_ids[below(n_loc)];
      if (shape == 4 && s->n_locs > 1)
        s->locs[1 + below((unsigned)s->n_locs - 1)] = loc_ids[below(n_loc)];
      else if (shape == 5 && s->n_locs > 0 && s->n_locs < MAX_DEPTH && below(2))
        s->locs[s->n_locs++] = loc_ids[below(n_loc)];
      else if (shape == 5 && below(2))
        s->locs[0] = samples[i - 1].locs[0];
    } else {
      s->n_locs = below(MAX_DEPTH);
      for (size_t d = 0; d < s->n_locs; d++)
        s->locs[d] = loc_ids[below(n_loc)];
    }
    for (unsigned t = 0; t < n_types; t++)
      s->values[t] = below(4) ? (int64_t)(rnd() >> below(64)) - 1000 : INT64_MIN;
    s->n_labels = below(MAX_LABELS + 1);
    for (size_t k = 0; k < s->n_labels; k++) {
      struct pprof_label *lb = &s->labels[k];
      snprintf(s->label_key[k], 16, "key%u", (unsigned)k % 100);
      snprintf(s->label_str[k], 16, "v%u", below(5));
      snprintf(s->label_unit[k], 16, "u%u", below(2));
      lb->key = s->label_key[k];
      lb->str = below(2) ? s->label_str[k] : NULL;
      lb->num = (int64_t)below(3) - 1;
      lb->num_unit = below(2) ? s->label_unit[k] : NULL;
    }
    CHECK(pprof_builder_add_sample(b, s->locs, s->n_locs, s->values, n_types, s->labels,
                                   s->n_labels) == 0);
  }
  CHECK(pprof_builder_encode(b, round % 3 ? 1 : -1, &gz, &len) == 0);
  if (getenv("PPROF_FUZZ_DUMP") && gz) {
    /* For the outside readers (go tool pprof -raw, protoc --decode) by hand. */
    char path[4096];
    FILE *f;
    snprintf(path, sizeof(path), "%s/fuzz-%u.pb.gz", getenv("PPROF_FUZZ_DUMP"), round);
    if ((f = fopen(path, "wb"))) {
      CHECK(fwrite(gz, 1, len, f) == len);
      fclose(f);
    }
  }
  raw = gunzip_profile(gz, len, 256u << 20, &rawlen);
  p = rawlen ? perftools__profiles__profile__unpack(NULL, rawlen, raw) : NULL;
  CHECK(p != NULL);
  if (!p)
    goto out;

  /* Strings: [0] is "", no duplicates, all UTF-8. */
  CHECK(p->n_string_table >= 1 && !strcmp(p->string_table[0], ""));
  for (size_t i = 1; i < p->n_string_table; i++) {
    CHECK(p->string_table[i][0] != '\0');
    CHECK(utf8_valid_prefix(p->string_table[i], strlen(p->string_table[i])) ==
          strlen(p->string_table[i]));
  }
  {
    /* Duplicates, by sorting copies of the pointers. */
    char **sorted = malloc(p->n_string_table * sizeof(*sorted));
    memcpy(sorted, p->string_table, p->n_string_table * sizeof(*sorted));
    qsort(sorted, p->n_string_table, sizeof(*sorted),
          (int (*)(const void *, const void *))(void *)strcmp);
    for (size_t i = 1; i < p->n_string_table; i++)
      CHECK(strcmp(sorted[i - 1], sorted[i]) != 0);
    free(sorted);
  }
  CHECK(p->n_sample_type == n_types && p->time_nanos == (int64_t)round * 1000000007 &&
        p->duration_nanos == 5 && p->period == (int64_t)round);
  CHECK(p->period_type && !strcmp(str_of(p, p->period_type->type), "type0"));
  CHECK(!strcmp(str_of(p, p->default_sample_type), n_types > 1 ? "type1" : "type0"));
  CHECK(p->n_mapping == n_map);
  for (size_t i = 0; i < p->n_mapping; i++)
    CHECK(p->mapping[i]->id == i + 1 && p->mapping[i]->file_offset == i);
  for (size_t i = 0; i < p->n_function; i++)
    CHECK(p->function[i]->id == i + 1 && p->function[i]->start_line == 7);
  /* Locations: ids a permutation of 1..N. */
  loc_by_id = calloc(p->n_location + 1, sizeof(*loc_by_id));
  for (size_t i = 0; i < p->n_location; i++) {
    uint64_t id = p->location[i]->id;
    CHECK(id >= 1 && id <= p->n_location && !loc_by_id[id]);
    if (id >= 1 && id <= p->n_location && !loc_by_id[id])
      loc_by_id[id] = p->location[i];
  }
  CHECK(p->n_sample == n_samples);
  for (size_t i = 0; i < p->n_sample && i < n_samples; i++) {
    const Perftools__Profiles__Sample *ps = p->sample[i];
    const struct sample *s = &samples[i];
    CHECK(ps->n_location_id == s->n_locs && ps->n_value == n_types && ps->n_label == s->n_labels);
    if (ps->n_location_id != s->n_locs || ps->n_value != n_types || ps->n_label != s->n_labels)
      break;
    for (unsigned t = 0; t < n_types; t++)
      CHECK(ps->value[t] == s->values[t]);
    for (size_t k = 0; k < s->n_labels; k++) {
      const Perftools__Profiles__Label *pl = ps->label[k];
      CHECK(!strcmp(str_of(p, pl->key), s->labels[k].key));
      if (s->labels[k].str) {
        CHECK(!strcmp(str_of(p, pl->str), s->labels[k].str) && !pl->num && !pl->num_unit);
      } else {
        CHECK(!pl->str && pl->num == s->labels[k].num);
        expect_str(want, sizeof(want), s->labels[k].num_unit);
        CHECK(!strcmp(str_of(p, pl->num_unit), want));
      }
    }
    for (size_t d = 0; d < s->n_locs; d++) {
      uint64_t id = ps->location_id[d];
      const Perftools__Profiles__Location *pl = id <= p->n_location ? loc_by_id[id] : NULL;
      const struct loc *ml = NULL;
      for (unsigned l = 0; l < n_loc && !ml; l++)
        if (loc_ids[l] == s->locs[d])
          ml = &locs[l];
      CHECK(pl && ml);
      if (!pl || !ml)
        goto out;
      CHECK(pl->mapping_id == ml->mapping && pl->address == ml->address);
      CHECK(pl->n_line == (ml->fn ? 1u : 0u));
      if (ml->fn && pl->n_line == 1) {
        const Perftools__Profiles__Function *pf;
        uint64_t fid = pl->line[0]->function_id;
        CHECK(fid >= 1 && fid <= p->n_function && pl->line[0]->line == ml->line);
        if (fid < 1 || fid > p->n_function)
          goto out;
        pf = p->function[fid - 1];
        /* The function the builder interned first under the same strings. */
        expect_str(want, sizeof(want), fns[ml->fn - 1].name);
        CHECK(!strcmp(str_of(p, pf->name), want));
        expect_str(want, sizeof(want), fns[ml->fn - 1].sys);
        CHECK(!strcmp(str_of(p, pf->system_name), want));
        expect_str(want, sizeof(want), fns[ml->fn - 1].file);
        CHECK(!strcmp(str_of(p, pf->filename), want));
      }
    }
  }
out:
  if (failures)
    fprintf(stderr, "pprof_fuzz_test: round %u failed (seed %" PRIu64 ")\n", round, rng);
  free(loc_by_id);
  perftools__profiles__profile__free_unpacked(p, NULL);
  free(raw);
  free(gz);
}

int main(int argc, char **argv)
{
  struct pprof_builder *b = pprof_builder_new();
  unsigned rounds = argc > 1 ? (unsigned)atoi(argv[1]) : 40;

  if (!b)
    return 2;
  for (unsigned r = 0; r < rounds && !failures; r++)
    one_round(b, r, 1 + r % 3);
  pprof_builder_free(b);
  if (failures)
    return 1;
  printf("pprof_fuzz_test: ok\n");
  return 0;
}
