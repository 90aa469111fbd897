/* A pprof profile builder: interned strings, functions, locations, mappings, samples; gzip. */
#include "export/pprof.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "export/pbframe.h"
#include "export/utf8.h"
#include "proto/profile.pb-c.h"

#define MAX_SAMPLE_TYPES 8
#define ARENA_CHUNK (64u << 10)
/* Encoding: raw protobuf bytes are staged in STAGE_SIZE pieces for deflate (small enough to
 * stay in cache), messages other than samples are packed BATCH at a time. */
#define STAGE_SIZE (128u << 10)
#define BATCH 256
#define OUT_MIN (64u << 10)

struct function {
  int64_t name, system_name, filename, start_line;
};

struct location {
  uint64_t mapping_id, address, function_id;
  int64_t line;
  uint64_t uses; /* in samples: the most used get the smallest ids (shortest varints) */
};

struct mapping {
  uint64_t memory_start, memory_limit, file_offset;
  int64_t filename, build_id;
  int has_functions;
};

/* A sample whose location ids after the first (the leaf) are those of the last sample stored
 * whole (the run's first) stores only its leaf (shares_rest): the agent adds one sample per
 * kernel of the same stack one after the other, so most samples are stored as one id and
 * encoded from the run's packed ids (encode_samples). */
struct sample {
  size_t loc_off, label_off;
  uint32_t n_locs : 31, shares_rest : 1; /* n_locs: the sample's, whether stored or not */
  uint32_t n_labels;
};

struct label {
  int64_t key, str, num, num_unit;
};

/* Open-addressing index of item positions (+1; 0 = empty), with the items' hashes. */
struct index {
  uint32_t *slots;
  uint64_t *hashes;
  size_t cap, used;
};

/* Strings are copied into chunks that reset reuses; a chunk is never moved, so the interned
 * pointers stay valid until reset. */
struct chunk {
  char *mem;
  size_t size;
};

#define VEC(type)                                                                                  \
  struct {                                                                                         \
    type *v;                                                                                       \
    size_t n, cap;                                                                                 \
  }

/* What encoding reuses from one profile to the next. */
struct encoder {
  z_stream z;
  int z_ready, z_level;
  uint8_t *stage, *out;
  size_t stage_len, stage_cap, out_len, out_cap;
  /* labels[i] is the packed Label of the builder's label i, label_bufs a sample's labels. */
  ProtobufCBinaryData *labels, *label_bufs;
  uint8_t *label_bytes;
  size_t labels_cap, label_bufs_cap, label_bytes_cap;
  /* Location ids as written: order[k] is the builder's location written with id k + 1, and
   * id_of[i] the id written for the builder's location i + 1; ids holds a sample's location
   * ids, renumbered. */
  uint32_t *order, *id_of, *ids;
  size_t order_cap, ids_cap;
  /* The packed ids of a run of samples after its leaf (rest_len bytes at rest + rest_off),
   * packed once for the run, and leaf[i] the packed id of the builder's location i (leaf[i][0]
   * bytes from leaf[i] + 1; 0: not packed yet), packed on first use (encode_samples). */
  uint8_t *rest;
  size_t rest_off, rest_len, rest_cap;
  uint8_t (*leaf)[8];
  size_t leaf_cap;
  Perftools__Profiles__Location locations[BATCH], *location_ptrs[BATCH];
  Perftools__Profiles__Line lines[BATCH], *line_ptrs[BATCH];
  Perftools__Profiles__Function functions[BATCH], *function_ptrs[BATCH];
  Perftools__Profiles__Mapping mappings[BATCH], *mapping_ptrs[BATCH];
};

struct pprof_builder {
  VEC(const char *) strings;
  struct index string_index;
  VEC(struct chunk) chunks;
  size_t chunk_cur, chunk_used;

  VEC(struct function) functions;
  struct index function_index;
  VEC(struct location) locations;
  struct index location_index;
  VEC(struct mapping) mappings;

  VEC(struct sample) samples;
  VEC(uint32_t) sample_locs; /* location indexes (id - 1): half the memory of the ids */
  size_t run_off;            /* in sample_locs: the last sample stored whole, run_n ids */
  uint32_t run_n;
  VEC(int64_t) sample_values;
  VEC(struct label) labels; /* distinct labels: a window has few (the `gpu` values) */
  struct index label_index;
  VEC(uint32_t) sample_labels; /* label indexes */
  VEC(int64_t) comments;

  int64_t types[MAX_SAMPLE_TYPES][2];
  size_t n_types;
  int64_t period_type[2], period, default_type;
  int64_t time_nanos, duration_nanos;
  int failed;
  struct encoder enc;
};

/* Grows v (of elements of `size` bytes) to hold at least `need`; 0 or -ENOMEM. */
static int vec_reserve(void **v, size_t *cap, size_t need, size_t size)
{
  size_t c = *cap ? *cap : 16;
  void *p;

  if (need <= *cap)
    return 0;
  while (c < need)
    c *= 2;
  p = realloc(*v, c * size);
  if (!p)
    return -ENOMEM;
  *v = p;
  *cap = c;
  return 0;
}

#define VEC_PUSH(b, vec, item)                                                                     \
  (vec_reserve((void **)&(vec).v, &(vec).cap, (vec).n + 1, sizeof(*(vec).v))                       \
       ? ((b)->failed = 1, -ENOMEM)                                                                \
       : ((vec).v[(vec).n++] = (item), 0))

static uint64_t mix(uint64_t h, uint64_t x)
{
  h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 29);
}

/*
 * The string's hash, 8 bytes a step (multiply and xor-shift; mix's avalanche at the end): every
 * string handed to the builder is hashed, most of them already interned, and a byte-at-a-time
 * hash was the largest cost of building a window (docs/PERFORMANCE.md). The shift folds the
 * product's high half, where a multiply leaves the difference of a word's high bytes, into its
 * low half before the next word: with a rotate instead, the next word's few differing bytes
 * cancelled it and 8% of names like "void k<123>(float*)" collided on all 64 bits
 * (tests/pprof/pprof_hash_test.c). memcpy loads: any alignment, nothing read past the NUL.
 */
static uint64_t hash_bytes(const char *s, size_t len)
{
  uint64_t h = 0xcbf29ce484222325ull ^ len, w;

  for (; len >= 8; s += 8, len -= 8) {
    memcpy(&w, s, 8);
    h = (h ^ w) * 0x9fb21c651e98df25ull;
    h ^= h >> 32;
  }
  if (len) {
    w = 0;
    memcpy(&w, s, len);
    h = (h ^ w) * 0x9fb21c651e98df25ull;
  }
  return mix(h, 0);
}

static void index_clear(struct index *ix)
{
  if (ix->slots)
    memset(ix->slots, 0, ix->cap * sizeof(*ix->slots));
  ix->used = 0;
}

static void index_free(struct index *ix)
{
  free(ix->slots);
  free(ix->hashes);
}

typedef int (*index_eq_fn)(const struct pprof_builder *b, size_t pos, const void *key);

/* The position of the item equal to key, or -1; *slot_out is where it would go. */
static long index_find(const struct pprof_builder *b, const struct index *ix, uint64_t h,
                       index_eq_fn eq, const void *key, size_t *slot_out)
{
  size_t i;

  if (!ix->cap) {
    *slot_out = 0;
    return -1;
  }
  for (i = h & (ix->cap - 1); ix->slots[i]; i = (i + 1) & (ix->cap - 1))
    if (ix->hashes[i] == h && eq(b, ix->slots[i] - 1, key))
      return (long)ix->slots[i] - 1;
  *slot_out = i;
  return -1;
}

/* Records pos under h (after a failed find that returned slot). Grows at half full. */
static int index_add(struct index *ix, uint64_t h, size_t slot, size_t pos)
{
  if ((ix->used + 1) * 2 > ix->cap) {
    size_t cap = ix->cap ? ix->cap * 2 : 256;
    uint32_t *slots = calloc(cap, sizeof(*slots));
    uint64_t *hashes = malloc(cap * sizeof(*hashes));

    if (!slots || !hashes) {
      free(slots);
      free(hashes);
      return -ENOMEM;
    }
    for (size_t i = 0; i < ix->cap; i++) {
      size_t j;
      if (!ix->slots[i])
        continue;
      for (j = ix->hashes[i] & (cap - 1); slots[j]; j = (j + 1) & (cap - 1))
        ;
      slots[j] = ix->slots[i];
      hashes[j] = ix->hashes[i];
    }
    free(ix->slots);
    free(ix->hashes);
    ix->slots = slots;
    ix->hashes = hashes;
    ix->cap = cap;
    for (slot = h & (cap - 1); ix->slots[slot]; slot = (slot + 1) & (cap - 1))
      ;
  }
  ix->slots[slot] = (uint32_t)(pos + 1);
  ix->hashes[slot] = h;
  ix->used++;
  return 0;
}

struct pprof_builder *pprof_builder_new(void)
{
  struct pprof_builder *b = calloc(1, sizeof(*b));

  if (!b)
    return NULL;
  for (size_t i = 0; i < BATCH; i++) {
    b->enc.location_ptrs[i] = &b->enc.locations[i];
    b->enc.function_ptrs[i] = &b->enc.functions[i];
    b->enc.mapping_ptrs[i] = &b->enc.mappings[i];
  }
  pprof_builder_reset(b);
  return b;
}

void pprof_builder_free(struct pprof_builder *b)
{
  if (!b)
    return;
  for (size_t i = 0; i < b->chunks.n; i++)
    free(b->chunks.v[i].mem);
  free(b->chunks.v);
  free(b->strings.v);
  index_free(&b->string_index);
  free(b->functions.v);
  index_free(&b->function_index);
  free(b->locations.v);
  index_free(&b->location_index);
  free(b->mappings.v);
  free(b->samples.v);
  free(b->sample_locs.v);
  free(b->sample_values.v);
  free(b->labels.v);
  index_free(&b->label_index);
  free(b->sample_labels.v);
  free(b->comments.v);
  if (b->enc.z_ready)
    deflateEnd(&b->enc.z);
  free(b->enc.stage);
  free(b->enc.out);
  free(b->enc.labels);
  free(b->enc.label_bufs);
  free(b->enc.label_bytes);
  free(b->enc.order);
  free(b->enc.id_of);
  free(b->enc.ids);
  free(b->enc.rest);
  free(b->enc.leaf);
  free(b);
}

void pprof_builder_reset(struct pprof_builder *b)
{
  b->strings.n = 0;
  index_clear(&b->string_index);
  b->chunk_cur = 0;
  b->chunk_used = 0;
  b->functions.n = 0;
  index_clear(&b->function_index);
  b->locations.n = 0;
  index_clear(&b->location_index);
  b->mappings.n = 0;
  b->samples.n = 0;
  b->sample_locs.n = 0;
  b->run_n = 0;
  b->sample_values.n = 0;
  b->labels.n = 0;
  index_clear(&b->label_index);
  b->sample_labels.n = 0;
  b->comments.n = 0;
  b->n_types = 0;
  b->period_type[0] = b->period_type[1] = b->period = b->default_type = 0;
  b->time_nanos = b->duration_nanos = 0;
  b->failed = 0;
  /* string_table[0] must be "": pprof rejects the profile otherwise. */
  VEC_PUSH(b, b->strings, "");
}

/* A copy of s (len bytes + NUL) in the current chunk, or a new one. */
static char *arena_copy(struct pprof_builder *b, const char *s, size_t len)
{
  struct chunk *c;
  char *p;

  while (b->chunk_cur < b->chunks.n) {
    c = &b->chunks.v[b->chunk_cur];
    if (c->size - b->chunk_used > len) {
      p = c->mem + b->chunk_used;
      memcpy(p, s, len);
      p[len] = '\0';
      b->chunk_used += len + 1;
      return p;
    }
    b->chunk_cur++;
    b->chunk_used = 0;
  }
  {
    struct chunk nc = {.size = len + 1 > ARENA_CHUNK ? len + 1 : ARENA_CHUNK};
    nc.mem = malloc(nc.size);
    if (!nc.mem || VEC_PUSH(b, b->chunks, nc)) {
      free(nc.mem);
      b->failed = 1;
      return NULL;
    }
  }
  return arena_copy(b, s, len);
}

static int string_eq(const struct pprof_builder *b, size_t pos, const void *key)
{
  return !strcmp(b->strings.v[pos], key);
}

/*
 * Pyroscope rejects a whole profile with one string that is not UTF-8 (formats.md 1.2), and
 * file names, symbols and labels are bytes: NULL when s is valid, else a malloc'd copy with
 * every invalid byte replaced by '?'.
 */
static char *utf8_sanitized(const char *s, int *nomem)
{
  size_t len = strlen(s);
  char *out;

  if (utf8_valid_prefix(s, len) == len)
    return NULL;
  out = malloc(len + 1);
  if (!out) {
    *nomem = 1;
    return NULL;
  }
  memcpy(out, s, len + 1);
  utf8_fix(out);
  return out;
}

int64_t pprof_builder_string(struct pprof_builder *b, const char *s)
{
  uint64_t h;
  size_t len, slot;
  long pos;
  char *copy, *clean;
  int nomem = 0;

  if (!s || !*s)
    return 0;
  len = strlen(s);
  h = hash_bytes(s, len);
  /* The table holds only valid UTF-8 (what is not is added sanitized), so a string found in it
   * needs no check: only new strings, and those that are not UTF-8, are scanned. */
  pos = index_find(b, &b->string_index, h, string_eq, s, &slot);
  if (pos >= 0)
    return pos;
  if ((clean = utf8_sanitized(s, &nomem)) != NULL) {
    pos = pprof_builder_string(b, clean);
    free(clean);
    return pos;
  }
  /* Never intern the invalid bytes: Pyroscope rejects a whole profile for one such string. */
  if (nomem) {
    b->failed = 1;
    return 0;
  }
  copy = arena_copy(b, s, len);
  if (!copy || VEC_PUSH(b, b->strings, copy))
    return 0;
  if (index_add(&b->string_index, h, slot, b->strings.n - 1)) {
    b->failed = 1;
    return 0;
  }
  return (int64_t)b->strings.n - 1;
}

int pprof_builder_add_sample_type(struct pprof_builder *b, const char *type, const char *unit)
{
  /* Samples already added hold one value per earlier type: a new column would misalign them
   * (encode reads sample i's values at i * n_types). */
  if (b->n_types == MAX_SAMPLE_TYPES || b->samples.n)
    return -EINVAL;
  b->types[b->n_types][0] = pprof_builder_string(b, type);
  b->types[b->n_types][1] = pprof_builder_string(b, unit);
  b->n_types++;
  return b->failed ? -ENOMEM : 0;
}

void pprof_builder_set_period(struct pprof_builder *b, const char *type, const char *unit,
                              int64_t period)
{
  b->period_type[0] = pprof_builder_string(b, type);
  b->period_type[1] = pprof_builder_string(b, unit);
  b->period = period;
}

void pprof_builder_set_default_sample_type(struct pprof_builder *b, const char *type)
{
  b->default_type = pprof_builder_string(b, type);
}

void pprof_builder_set_time(struct pprof_builder *b, int64_t time_nanos, int64_t duration_nanos)
{
  b->time_nanos = time_nanos;
  b->duration_nanos = duration_nanos;
}

int pprof_builder_add_comment(struct pprof_builder *b, const char *text)
{
  int64_t s = pprof_builder_string(b, text);

  return s ? VEC_PUSH(b, b->comments, s) : -ENOMEM;
}

uint64_t pprof_builder_add_mapping(struct pprof_builder *b, const struct pprof_mapping *m)
{
  struct mapping x = {
      .memory_start = m->memory_start,
      .memory_limit = m->memory_limit,
      .file_offset = m->file_offset,
      .filename = pprof_builder_string(b, m->filename),
      .build_id = pprof_builder_string(b, m->build_id),
      .has_functions = m->has_functions,
  };

  if (b->failed || VEC_PUSH(b, b->mappings, x))
    return 0;
  return b->mappings.n;
}

static int function_eq(const struct pprof_builder *b, size_t pos, const void *key)
{
  const struct function *f = &b->functions.v[pos], *k = key;
  return f->name == k->name && f->system_name == k->system_name && f->filename == k->filename;
}

uint64_t pprof_builder_function(struct pprof_builder *b, const char *name, const char *system_name,
                                const char *filename, int64_t start_line)
{
  struct function f = {pprof_builder_string(b, name), pprof_builder_string(b, system_name),
                       pprof_builder_string(b, filename), start_line};
  uint64_t h = mix(mix(mix(1, (uint64_t)f.name), (uint64_t)f.system_name), (uint64_t)f.filename);
  size_t slot;
  long pos;

  if (b->failed)
    return 0;
  pos = index_find(b, &b->function_index, h, function_eq, &f, &slot);
  if (pos >= 0)
    return (uint64_t)pos + 1;
  if (VEC_PUSH(b, b->functions, f))
    return 0;
  if (index_add(&b->function_index, h, slot, b->functions.n - 1)) {
    b->failed = 1;
    return 0;
  }
  return b->functions.n;
}

static int location_eq(const struct pprof_builder *b, size_t pos, const void *key)
{
  const struct location *l = &b->locations.v[pos], *k = key;
  return l->mapping_id == k->mapping_id && l->address == k->address &&
         l->function_id == k->function_id && l->line == k->line;
}

uint64_t pprof_builder_location(struct pprof_builder *b, uint64_t mapping_id, uint64_t address,
                                uint64_t function_id, int64_t line)
{
  struct location l = {mapping_id, address, function_id, line, 0};
  uint64_t h = mix(mix(mix(mix(2, mapping_id), address), function_id), (uint64_t)line);
  size_t slot;
  long pos;

  if (b->failed || mapping_id > b->mappings.n || function_id > b->functions.n)
    return 0;
  pos = index_find(b, &b->location_index, h, location_eq, &l, &slot);
  if (pos >= 0)
    return (uint64_t)pos + 1;
  if (VEC_PUSH(b, b->locations, l))
    return 0;
  if (index_add(&b->location_index, h, slot, b->locations.n - 1)) {
    b->failed = 1;
    return 0;
  }
  return b->locations.n;
}

static int label_eq(const struct pprof_builder *b, size_t pos, const void *key)
{
  const struct label *l = &b->labels.v[pos], *k = key;
  return l->key == k->key && l->str == k->str && l->num == k->num && l->num_unit == k->num_unit;
}

/* The index of label l in b->labels, added if new; -1 when out of memory. */
static long label_intern(struct pprof_builder *b, const struct label *l)
{
  uint64_t h = mix(mix(mix(mix(3, (uint64_t)l->key), (uint64_t)l->str), (uint64_t)l->num),
                   (uint64_t)l->num_unit);
  size_t slot;
  long pos = index_find(b, &b->label_index, h, label_eq, l, &slot);

  if (pos >= 0)
    return pos;
  if (VEC_PUSH(b, b->labels, *l))
    return -1;
  if (index_add(&b->label_index, h, slot, b->labels.n - 1)) {
    b->failed = 1;
    return -1;
  }
  return (long)b->labels.n - 1;
}

uint64_t pprof_builder_label(struct pprof_builder *b, const struct pprof_label *label)
{
  struct label l = {.key = pprof_builder_string(b, label->key)};
  long pos;

  if (label->str) {
    l.str = pprof_builder_string(b, label->str);
  } else {
    l.num = label->num;
    l.num_unit = pprof_builder_string(b, label->num_unit);
  }
  if (b->failed || (pos = label_intern(b, &l)) < 0)
    return 0;
  return (uint64_t)pos + 1;
}

/* Checks a sample and makes room for it; its labels then go to sample_labels.v[n...]. */
static int sample_reserve(struct pprof_builder *b, const uint64_t *location_ids, size_t n_locs,
                          size_t n_values, size_t n_labels)
{
  if (n_values != b->n_types || n_locs >= 1u << 31)
    return -EINVAL;
  for (size_t i = 0; i < n_locs; i++)
    if (!location_ids[i] || location_ids[i] > b->locations.n)
      return -EINVAL;
  if (b->failed ||
      vec_reserve((void **)&b->sample_locs.v, &b->sample_locs.cap, b->sample_locs.n + n_locs,
                  sizeof(uint32_t)) ||
      vec_reserve((void **)&b->sample_values.v, &b->sample_values.cap,
                  b->sample_values.n + n_values, sizeof(int64_t)) ||
      vec_reserve((void **)&b->sample_labels.v, &b->sample_labels.cap,
                  b->sample_labels.n + n_labels, sizeof(uint32_t))) {
    b->failed = 1;
    return -ENOMEM;
  }
  return 0;
}

/* Adds the sample whose labels sample_reserve's caller wrote. */
static int sample_commit(struct pprof_builder *b, const uint64_t *location_ids, size_t n_locs,
                         const int64_t *values, size_t n_values, size_t n_labels)
{
  struct sample s = {b->sample_locs.n, b->sample_labels.n, (uint32_t)n_locs, 0, (uint32_t)n_labels};
  size_t i = 1;

  /* Compared here, where the run's ids are still in cache: the encoder then reads one id of
   * such a sample instead of every frame's. */
  if (n_locs > 1 && n_locs == b->run_n) {
    const uint32_t *run = b->sample_locs.v + b->run_off;

    while (i < n_locs && run[i] == location_ids[i] - 1)
      i++;
    s.shares_rest = i == n_locs;
  }
  if (VEC_PUSH(b, b->samples, s))
    return -ENOMEM;
  b->sample_labels.n += n_labels;
  for (i = 0; i < n_locs; i++)
    b->locations.v[location_ids[i] - 1].uses++;
  if (s.shares_rest) {
    b->sample_locs.v[b->sample_locs.n++] = (uint32_t)(location_ids[0] - 1);
  } else {
    b->run_off = b->sample_locs.n;
    b->run_n = (uint32_t)n_locs;
    for (i = 0; i < n_locs; i++)
      b->sample_locs.v[b->sample_locs.n++] = (uint32_t)(location_ids[i] - 1);
  }
  memcpy(b->sample_values.v + b->sample_values.n, values, n_values * sizeof(int64_t));
  b->sample_values.n += n_values;
  return 0;
}

int pprof_builder_add_sample(struct pprof_builder *b, const uint64_t *location_ids, size_t n_locs,
                             const int64_t *values, size_t n_values,
                             const struct pprof_label *labels, size_t n_labels)
{
  int ret = sample_reserve(b, location_ids, n_locs, n_values, n_labels);

  for (size_t i = 0; !ret && i < n_labels; i++) {
    uint64_t id = pprof_builder_label(b, &labels[i]);

    if (!id)
      return -ENOMEM;
    b->sample_labels.v[b->sample_labels.n + i] = (uint32_t)(id - 1);
  }
  return ret ? ret : sample_commit(b, location_ids, n_locs, values, n_values, n_labels);
}

int pprof_builder_add_sample_labels(struct pprof_builder *b, const uint64_t *location_ids,
                                    size_t n_locs, const int64_t *values, size_t n_values,
                                    const uint64_t *label_ids, size_t n_labels)
{
  int ret = sample_reserve(b, location_ids, n_locs, n_values, n_labels);

  for (size_t i = 0; !ret && i < n_labels; i++) {
    if (!label_ids[i] || label_ids[i] > b->labels.n)
      return -EINVAL;
    b->sample_labels.v[b->sample_labels.n + i] = (uint32_t)(label_ids[i] - 1);
  }
  return ret ? ret : sample_commit(b, location_ids, n_locs, values, n_values, n_labels);
}

size_t pprof_builder_sample_count(const struct pprof_builder *b)
{
  return b->samples.n;
}

size_t pprof_builder_location_count(const struct pprof_builder *b)
{
  return b->locations.n;
}

/* ---- encoding ----
 *
 * The profile is never materialized as one protobuf-c tree nor as one serialized buffer. A
 * serialized protobuf message is the concatenation of its fields, and concatenated messages
 * parse as their merge, so the Profile is written as a sequence of small Profile messages
 * packed by protobuf-c: first the scalars, sample types and mappings, then the samples, then
 * batches of locations, functions and strings. Samples, the per-sample path, are packed one by
 * one through a lean view of Sample (SampleView: same field numbers, same bytes, fewer fields
 * for protobuf-c to walk) and framed as Profile.sample fields (encode_samples). Everything is
 * packed into a fixed staging buffer that stays in cache and is handed to deflate when full.
 * Nothing here allocates in steady state: the batch structs, the staging buffer, the zlib
 * stream and the output buffer live in the builder and are reused window after window.
 */

/* Upper bounds of a message's packed size (tag + length prefix + fields; 10 bytes a varint),
 * so that a batch is packed straight into the staging buffer without a sizing pass. */
#define FRAME_BOUND 16u
#define LABEL_BOUND (4 * 11u)
#define SAMPLE_BOUND(n_locs, n_values, n_labels)                                                   \
  (3 * FRAME_BOUND + 10u * (n_locs) + 10u * (n_values) + (FRAME_BOUND + LABEL_BOUND) * (n_labels))
#define LOCATION_BOUND (2 * FRAME_BOUND + 6 * 11u)
#define FUNCTION_BOUND (FRAME_BOUND + 5 * 11u)
#define MAPPING_BOUND (FRAME_BOUND + 10 * 11u)

static int out_reserve(struct pprof_builder *b)
{
  struct encoder *e = &b->enc;
  size_t cap = e->out_cap ? e->out_cap * 2 : OUT_MIN;
  uint8_t *p;

  if (e->out_len < e->out_cap)
    return 0;
  p = realloc(e->out, cap);
  if (!p)
    return -ENOMEM;
  e->out = p;
  e->out_cap = cap;
  return 0;
}

/* Compresses the staged bytes (and with Z_FINISH, ends the gzip stream). */
static int stage_flush(struct pprof_builder *b, int flush)
{
  struct encoder *e = &b->enc;
  int rc;

  e->z.next_in = e->stage;
  e->z.avail_in = (uInt)e->stage_len;
  for (;;) {
    if (out_reserve(b))
      return -ENOMEM;
    e->z.next_out = e->out + e->out_len;
    /* zlib counts in uInt: a larger buffer is filled in pieces. */
    e->z.avail_out =
        e->out_cap - e->out_len > UINT_MAX ? UINT_MAX : (uInt)(e->out_cap - e->out_len);
    rc = deflate(&e->z, flush);
    e->out_len = (size_t)(e->z.next_out - e->out);
    if (rc == Z_STREAM_ERROR)
      return -EIO;
    if (flush == Z_FINISH ? rc == Z_STREAM_END : !e->z.avail_in && e->z.avail_out)
      break;
  }
  e->stage_len = 0;
  return 0;
}

/* Room for bound more bytes in the staging buffer: flushes it, or grows it for one message
 * larger than the buffer (a very long string). */
static int stage_reserve(struct pprof_builder *b, size_t bound)
{
  struct encoder *e = &b->enc;
  int ret;

  if (e->stage_cap - e->stage_len >= bound)
    return 0;
  ret = stage_flush(b, Z_NO_FLUSH);
  if (ret || e->stage_cap >= bound)
    return ret;
  free(e->stage);
  e->stage_cap = 0;
  if (!(e->stage = malloc(bound)))
    return -ENOMEM;
  e->stage_cap = bound;
  return 0;
}

/* Packs a Profile holding some fields (one batch) into the staging buffer. */
static int stage_pack(struct pprof_builder *b, const Perftools__Profiles__Profile *p, size_t bound)
{
  struct encoder *e = &b->enc;
  int ret = stage_reserve(b, bound);

  if (ret)
    return ret;
  e->stage_len += perftools__profiles__profile__pack(p, e->stage + e->stage_len);
  return 0;
}

static int encode_header(struct pprof_builder *b)
{
  struct encoder *e = &b->enc;
  Perftools__Profiles__Profile p = PERFTOOLS__PROFILES__PROFILE__INIT;
  Perftools__Profiles__ValueType types[MAX_SAMPLE_TYPES], period_type;
  Perftools__Profiles__ValueType *type_ptrs[MAX_SAMPLE_TYPES];
  size_t i = 0;
  int ret;

  for (i = 0; i < b->n_types; i++) {
    perftools__profiles__value_type__init(&types[i]);
    types[i].type = b->types[i][0];
    types[i].unit = b->types[i][1];
    type_ptrs[i] = &types[i];
  }
  p.n_sample_type = b->n_types;
  p.sample_type = type_ptrs;
  perftools__profiles__value_type__init(&period_type);
  period_type.type = b->period_type[0];
  period_type.unit = b->period_type[1];
  p.period_type = &period_type;
  p.period = b->period;
  p.default_sample_type = b->default_type;
  p.time_nanos = b->time_nanos;
  p.duration_nanos = b->duration_nanos;
  p.n_comment = b->comments.n;
  p.comment = b->comments.v;
  ret = stage_pack(b, &p, perftools__profiles__profile__get_packed_size(&p));
  /* Mappings, in batches like the rest. */
  perftools__profiles__profile__init(&p);
  p.mapping = e->mapping_ptrs;
  for (i = 0; !ret && i < b->mappings.n;) {
    for (p.n_mapping = 0; i < b->mappings.n && p.n_mapping < BATCH; i++, p.n_mapping++) {
      const struct mapping *m = &b->mappings.v[i];
      Perftools__Profiles__Mapping *pm = &e->mappings[p.n_mapping];

      perftools__profiles__mapping__init(pm);
      pm->id = i + 1;
      pm->memory_start = m->memory_start;
      pm->memory_limit = m->memory_limit;
      pm->file_offset = m->file_offset;
      pm->filename = m->filename;
      pm->build_id = m->build_id;
      pm->has_functions = m->has_functions;
    }
    ret = stage_pack(b, &p, p.n_mapping * MAPPING_BOUND);
  }
  return ret;
}

/* Grows *v (of elements of `size` bytes) to hold at least n; 0 or -ENOMEM. */
static int scratch_reserve(void **v, size_t *cap, size_t n, size_t size)
{
  void *p;

  if (n <= *cap)
    return 0;
  p = realloc(*v, n * size);
  if (!p)
    return -ENOMEM;
  *v = p;
  *cap = n;
  return 0;
}

/*
 * Location ids by use: a sample lists every frame's id as a varint, so ids 1..127 (one byte)
 * go to the most used locations (the outer frames every stack shares, the kernels) and the
 * least used get the longest varints. On a 100 000-sample window this makes the samples
 * about 10% smaller and 20% smaller compressed (docs/PERFORMANCE.md). A stable radix sort
 * (no malloc, unlike qsort): ties keep the order of addition, so the same profile always
 * encodes to the same bytes.
 */
static int number_locations(struct pprof_builder *b)
{
  struct encoder *e = &b->enc;
  size_t i, n = b->locations.n, count[256];
  uint64_t max = 0;
  uint32_t *tmp;

  if (n > e->order_cap) {
    void *o = realloc(e->order, n * sizeof(*e->order));
    if (!o)
      return -ENOMEM;
    e->order = o;
    o = realloc(e->id_of, n * sizeof(*e->id_of));
    if (!o)
      return -ENOMEM;
    e->id_of = o;
    e->order_cap = n;
  }
  for (i = 0; i < n; i++) {
    e->order[i] = (uint32_t)i;
    if (b->locations.v[i].uses > max)
      max = b->locations.v[i].uses;
  }
  /* Byte by byte from the lowest, each digit inverted for a descending order; id_of is the
   * scratch array until the last pass. */
  for (unsigned shift = 0; shift < 64 && max >> shift; shift += 8) {
    size_t pos = 0;

    memset(count, 0, sizeof(count));
    for (i = 0; i < n; i++)
      count[255 - (b->locations.v[e->order[i]].uses >> shift & 255)]++;
    for (i = 0; i < 256; i++) {
      size_t c = count[i];
      count[i] = pos;
      pos += c;
    }
    for (i = 0; i < n; i++)
      e->id_of[count[255 - (b->locations.v[e->order[i]].uses >> shift & 255)]++] = e->order[i];
    tmp = e->order;
    e->order = e->id_of;
    e->id_of = tmp;
  }
  for (i = 0; i < n; i++)
    e->id_of[e->order[i]] = (uint32_t)(i + 1);
  return 0;
}

/*
 * Packs each distinct label once, as a Label, with protobuf-c: a sample then carries the
 * bytes (SampleView's `label` is a bytes field, the same on the wire as a Label field), so
 * packing a sample does not walk a Label message per label.
 */
static int pack_labels(struct pprof_builder *b)
{
  struct encoder *e = &b->enc;
  Perftools__Profiles__Label m = PERFTOOLS__PROFILES__LABEL__INIT;
  size_t off = 0;

  if (scratch_reserve((void **)&e->labels, &e->labels_cap, b->labels.n, sizeof(*e->labels)) ||
      scratch_reserve((void **)&e->label_bytes, &e->label_bytes_cap, b->labels.n * LABEL_BOUND, 1))
    return -ENOMEM;
  for (size_t i = 0; i < b->labels.n; i++) {
    m.key = b->labels.v[i].key;
    m.str = b->labels.v[i].str;
    m.num = b->labels.v[i].num;
    m.num_unit = b->labels.v[i].num_unit;
    e->labels[i].data = e->label_bytes + off;
    e->labels[i].len = perftools__profiles__label__pack(&m, e->label_bytes + off);
    off += e->labels[i].len;
  }
  return 0;
}

/* Packs the location_id field of locs[0..n) (renumbered) into e->rest: the ids' varints are
 * the field's contents, after its key and length. */
static int pack_rest(struct encoder *e, const uint32_t *locs, size_t n)
{
  Perftools__Profiles__SampleView m = PERFTOOLS__PROFILES__SAMPLE_VIEW__INIT;
  size_t len, i = 1;

  if (scratch_reserve((void **)&e->rest, &e->rest_cap, FRAME_BOUND + 5 * n, 1))
    return -ENOMEM;
  for (size_t j = 0; j < n; j++)
    e->ids[j] = e->id_of[locs[j]];
  m.n_location_id = n;
  m.location_id = e->ids;
  len = perftools__profiles__sample_view__pack(&m, e->rest);
  /* Past the key (one byte) and the length (a varint). */
  while (i < len && e->rest[i] & 0x80)
    i++;
  e->rest_off = i + 1;
  e->rest_len = len - e->rest_off;
  return 0;
}

/* leaf[loc]: the packed id of location loc, the contents of a location_id field holding it
 * alone (after a key and a one-byte length: a uint32 varint is at most 5 bytes). Not inlined:
 * the hot path is a hit. */
__attribute__((noinline)) static void pack_leaf(struct encoder *e, uint32_t loc)
{
  Perftools__Profiles__SampleView m = PERFTOOLS__PROFILES__SAMPLE_VIEW__INIT;
  uint32_t id = e->id_of[loc];
  uint8_t field[16] = {0};

  m.n_location_id = 1;
  m.location_id = &id;
  e->leaf[loc][0] = (uint8_t)(perftools__profiles__sample_view__pack(&m, field) - 2);
  memcpy(e->leaf[loc] + 1, field + 2, sizeof(*e->leaf) - 1);
}

/*
 * Samples, each framed as one Profile.sample field around bytes protobuf-c packed. The agent
 * adds the samples of one stack one after the other (one per kernel and device): they differ
 * in the leaf (the kernel's frame) and share every other location id, and the builder marks
 * such a run (shares_rest). A sample of a run is assembled: its location_id field framed
 * around the leaf's packed id (packed once per location) and the run's other packed ids
 * (packed once for the run), then its values and labels packed per sample. Per sample,
 * protobuf-c walks the values and labels instead of every frame's id twice (sizing the packed
 * field, then writing it). The bytes are those of the sample packed whole: the same fields in
 * the same order, one location_id field (readers would also concatenate a packed field
 * written in two pieces, but deflate compressed that layout 3 - 20% worse: after the leaf came
 * the second piece's constant key and length, and the leaf with them repeated from
 * other stacks: docs/PERFORMANCE.md). A sample in no run is packed whole.
 */
static int encode_samples(struct pprof_builder *b)
{
  struct encoder *e = &b->enc;
  Perftools__Profiles__SampleView m = PERFTOOLS__PROFILES__SAMPLE_VIEW__INIT;
  const uint32_t *run = NULL, *id_of = e->id_of;
  size_t run_n = 0;
  int rest_ok = 0, ret = pack_labels(b);

  if (!ret && scratch_reserve((void **)&e->leaf, &e->leaf_cap, b->locations.n, sizeof(*e->leaf)))
    ret = -ENOMEM;
  if (!ret && b->locations.n)
    memset(e->leaf, 0, b->locations.n * sizeof(*e->leaf));
  m.n_value = b->n_types;
  for (size_t i = 0; !ret && i < b->samples.n; i++) {
    const struct sample *s = &b->samples.v[i];
    const uint32_t *locs = b->sample_locs.v + s->loc_off;
    const uint32_t *labels = b->sample_labels.v + s->label_off;
    size_t n = s->n_locs, n_l = s->n_labels, len = 0;
    /* In a run: this sample shares the rest of the one before, or the next shares its. */
    int split = s->shares_rest || (i + 1 < b->samples.n && s[1].shares_rest);
    uint8_t *p;

    if (vec_reserve((void **)&e->ids, &e->ids_cap, n, sizeof(*e->ids)) ||
        vec_reserve((void **)&e->label_bufs, &e->label_bufs_cap, n_l, sizeof(*e->label_bufs)))
      return -ENOMEM;
    if (!s->shares_rest) {
      run = locs;
      run_n = n;
      rest_ok = 0;
    }
    if (split && !rest_ok) {
      /* run: the ids of the run's first sample, the one stored whole. */
      if ((ret = pack_rest(e, run + 1, run_n - 1)))
        break;
      rest_ok = 1;
    }
    if ((ret = stage_reserve(b, SAMPLE_BOUND(n, b->n_types, n_l))))
      break;
    p = e->stage + e->stage_len;
    if (split) {
      const uint8_t *leaf = e->leaf[locs[0]];

      if (!leaf[0])
        pack_leaf(e, locs[0]);
      /* Sample.location_id (field 1, length-delimited) at p + 2, its contents at p + 4. The
       * whole leaf slot: a fixed-size copy, the bytes past the id are overwritten. */
      memcpy(p + 4, leaf + 1, sizeof(*e->leaf) - 1);
      memcpy(p + 4 + leaf[0], e->rest + e->rest_off, e->rest_len);
      len = pb_frame_field(p + 2, 0x0A, leaf[0] + e->rest_len);
      n = 0;
    }
    for (size_t j = 0; j < n; j++)
      e->ids[j] = id_of[locs[j]];
    for (size_t j = 0; j < n_l; j++)
      e->label_bufs[j] = e->labels[labels[j]];
    m.n_location_id = n;
    m.location_id = e->ids;
    m.value = b->sample_values.v + i * b->n_types;
    m.n_label = n_l;
    m.label = e->label_bufs;
    len += perftools__profiles__sample_view__pack(&m, p + 2 + len);
    /* Profile.sample: field 2, length-delimited. */
    e->stage_len += pb_frame_field(p, 0x12, len);
  }
  return ret;
}

static int encode_locations(struct pprof_builder *b)
{
  struct encoder *e = &b->enc;
  Perftools__Profiles__Profile p = PERFTOOLS__PROFILES__PROFILE__INIT;
  size_t i = 0;
  int ret;

  p.location = e->location_ptrs;
  while (i < b->locations.n) {
    for (p.n_location = 0; i < b->locations.n && p.n_location < BATCH; i++, p.n_location++) {
      const struct location *l = &b->locations.v[e->order[i]];
      Perftools__Profiles__Location *m = &e->locations[p.n_location];
      Perftools__Profiles__Line *line = &e->lines[p.n_location];

      perftools__profiles__location__init(m);
      m->id = i + 1;
      m->mapping_id = l->mapping_id;
      m->address = l->address;
      if (l->function_id) {
        perftools__profiles__line__init(line);
        line->function_id = l->function_id;
        line->line = l->line;
        e->line_ptrs[p.n_location] = line;
        m->n_line = 1;
        m->line = &e->line_ptrs[p.n_location];
      }
    }
    ret = stage_pack(b, &p, p.n_location * LOCATION_BOUND);
    if (ret)
      return ret;
  }
  return 0;
}

static int encode_functions(struct pprof_builder *b)
{
  struct encoder *e = &b->enc;
  Perftools__Profiles__Profile p = PERFTOOLS__PROFILES__PROFILE__INIT;
  size_t i = 0;
  int ret;

  p.function = e->function_ptrs;
  while (i < b->functions.n) {
    for (p.n_function = 0; i < b->functions.n && p.n_function < BATCH; i++, p.n_function++) {
      const struct function *f = &b->functions.v[i];
      Perftools__Profiles__Function *m = &e->functions[p.n_function];

      perftools__profiles__function__init(m);
      m->id = i + 1;
      m->name = f->name;
      m->system_name = f->system_name;
      m->filename = f->filename;
      m->start_line = f->start_line;
    }
    ret = stage_pack(b, &p, p.n_function * FUNCTION_BOUND);
    if (ret)
      return ret;
  }
  return 0;
}

static int encode_strings(struct pprof_builder *b)
{
  Perftools__Profiles__Profile p = PERFTOOLS__PROFILES__PROFILE__INIT;
  size_t i = 0, bound;
  int ret;

  while (i < b->strings.n) {
    p.string_table = (char **)b->strings.v + i;
    /* Strings are bounded by bytes: one may be long. */
    for (p.n_string_table = 0, bound = 0;
         i < b->strings.n && p.n_string_table < BATCH && bound < STAGE_SIZE / 2;
         i++, p.n_string_table++)
      bound += FRAME_BOUND + strlen(b->strings.v[i]);
    ret = stage_pack(b, &p, bound);
    if (ret)
      return ret;
  }
  return 0;
}

int pprof_builder_encode(struct pprof_builder *b, int level, uint8_t **out, size_t *len)
{
  struct encoder *e = &b->enc;
  int ret;

  *out = NULL;
  *len = 0;
  if (b->failed)
    return -ENOMEM;
  if (b->samples.n && !b->n_types)
    return -EINVAL;
  if (!e->stage) {
    if (!(e->stage = malloc(STAGE_SIZE)))
      return -ENOMEM;
    e->stage_cap = STAGE_SIZE;
  }
  /* One zlib stream for the builder's life: deflateInit's tables are reused. */
  if (e->z_ready && e->z_level != level) {
    deflateEnd(&e->z);
    e->z_ready = 0;
  }
  if (!e->z_ready) {
    memset(&e->z, 0, sizeof(e->z));
    /* 16 + 15: the gzip wrapper, which is what "*.pb.gz" readers sniff for (0x1f 0x8b). */
    if (deflateInit2(&e->z, level, Z_DEFLATED, 16 + 15, 8, Z_DEFAULT_STRATEGY) != Z_OK)
      return -ENOMEM;
    e->z_ready = 1;
    e->z_level = level;
  } else if (deflateReset(&e->z) != Z_OK) {
    return -EIO;
  }
  e->stage_len = 0;
  e->out_len = 0;
  /* String indexes are final: every string was interned when its item was added. */
  ret = number_locations(b);
  if (!ret)
    ret = encode_header(b);
  if (!ret)
    ret = encode_samples(b);
  if (!ret)
    ret = encode_locations(b);
  if (!ret)
    ret = encode_functions(b);
  if (!ret)
    ret = encode_strings(b);
  if (!ret)
    ret = stage_flush(b, Z_FINISH);
  if (ret)
    return ret;
  if (!(*out = malloc(e->out_len ? e->out_len : 1)))
    return -ENOMEM;
  memcpy(*out, e->out, e->out_len);
  *len = e->out_len;
  return 0;
}
