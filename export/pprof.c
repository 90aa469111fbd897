/* A pprof profile builder: interned strings, functions, locations, mappings, samples; gzip. */
#include "export/pprof.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "proto/profile.pb-c.h"

#define MAX_SAMPLE_TYPES 8
#define ARENA_CHUNK (64u << 10)

struct function {
  int64_t name, filename, start_line;
};

struct location {
  uint64_t mapping_id, address, function_id;
  int64_t line;
};

struct mapping {
  uint64_t memory_start, memory_limit, file_offset;
  int64_t filename, build_id;
  int has_functions;
};

struct sample {
  size_t loc_off, label_off;
  uint32_t n_locs, n_labels;
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
  VEC(uint64_t) sample_locs;
  VEC(int64_t) sample_values;
  VEC(struct label) sample_labels;
  VEC(int64_t) comments;

  int64_t types[MAX_SAMPLE_TYPES][2];
  size_t n_types;
  int64_t period_type[2], period, default_type;
  int64_t time_nanos, duration_nanos;
  int failed;
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

static uint64_t hash_bytes(const char *s)
{
  uint64_t h = 0xcbf29ce484222325ull;

  for (; *s; s++) {
    h ^= (unsigned char)*s;
    h *= 0x100000001b3ull;
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

  if (b)
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
  free(b->sample_labels.v);
  free(b->comments.v);
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
  b->sample_values.n = 0;
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

int64_t pprof_builder_string(struct pprof_builder *b, const char *s)
{
  uint64_t h;
  size_t slot;
  long pos;
  char *copy;

  if (!s || !*s)
    return 0;
  h = hash_bytes(s);
  pos = index_find(b, &b->string_index, h, string_eq, s, &slot);
  if (pos >= 0)
    return pos;
  copy = arena_copy(b, s, strlen(s));
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
  if (b->n_types == MAX_SAMPLE_TYPES)
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
  return f->name == k->name && f->filename == k->filename;
}

uint64_t pprof_builder_function(struct pprof_builder *b, const char *name, const char *filename,
                                int64_t start_line)
{
  struct function f = {pprof_builder_string(b, name), pprof_builder_string(b, filename),
                       start_line};
  uint64_t h = mix(mix(1, (uint64_t)f.name), (uint64_t)f.filename);
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
  struct location l = {mapping_id, address, function_id, line};
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

int pprof_builder_add_sample(struct pprof_builder *b, const uint64_t *location_ids, size_t n_locs,
                             const int64_t *values, size_t n_values,
                             const struct pprof_label *labels, size_t n_labels)
{
  struct sample s = {b->sample_locs.n, b->sample_labels.n, (uint32_t)n_locs, (uint32_t)n_labels};

  if (n_values != b->n_types)
    return -EINVAL;
  for (size_t i = 0; i < n_locs; i++)
    if (!location_ids[i] || location_ids[i] > b->locations.n)
      return -EINVAL;
  if (vec_reserve((void **)&b->sample_locs.v, &b->sample_locs.cap, b->sample_locs.n + n_locs,
                  sizeof(uint64_t)) ||
      vec_reserve((void **)&b->sample_values.v, &b->sample_values.cap,
                  b->sample_values.n + n_values, sizeof(int64_t)) ||
      vec_reserve((void **)&b->sample_labels.v, &b->sample_labels.cap,
                  b->sample_labels.n + n_labels, sizeof(struct label))) {
    b->failed = 1;
    return -ENOMEM;
  }
  for (size_t i = 0; i < n_labels; i++) {
    struct label l = {.key = pprof_builder_string(b, labels[i].key)};
    if (labels[i].str) {
      l.str = pprof_builder_string(b, labels[i].str);
    } else {
      l.num = labels[i].num;
      l.num_unit = pprof_builder_string(b, labels[i].num_unit);
    }
    b->sample_labels.v[b->sample_labels.n++] = l;
  }
  if (b->failed || VEC_PUSH(b, b->samples, s))
    return -ENOMEM;
  memcpy(b->sample_locs.v + b->sample_locs.n, location_ids, n_locs * sizeof(uint64_t));
  b->sample_locs.n += n_locs;
  memcpy(b->sample_values.v + b->sample_values.n, values, n_values * sizeof(int64_t));
  b->sample_values.n += n_values;
  return 0;
}

size_t pprof_builder_sample_count(const struct pprof_builder *b)
{
  return b->samples.n;
}

/* gzip of in[0..n) into a malloc'd buffer. */
static int gzip(const uint8_t *in, size_t n, int level, uint8_t **out, size_t *len)
{
  z_stream z;
  uint8_t *buf;
  size_t cap;
  int rc;

  memset(&z, 0, sizeof(z));
  /* 16 + 15: the gzip wrapper, which is what "*.pb.gz" readers sniff for (0x1f 0x8b). */
  if (deflateInit2(&z, level, Z_DEFLATED, 16 + 15, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    return -ENOMEM;
  cap = deflateBound(&z, n) + 32;
  buf = malloc(cap);
  if (!buf) {
    deflateEnd(&z);
    return -ENOMEM;
  }
  z.next_in = (Bytef *)in;
  z.avail_in = (uInt)n;
  z.next_out = buf;
  z.avail_out = (uInt)cap;
  rc = deflate(&z, Z_FINISH);
  *len = cap - z.avail_out;
  deflateEnd(&z);
  if (rc != Z_STREAM_END) {
    free(buf);
    return -EIO;
  }
  *out = buf;
  return 0;
}

int pprof_builder_encode(struct pprof_builder *b, int level, uint8_t **out, size_t *len)
{
  Perftools__Profiles__Profile p = PERFTOOLS__PROFILES__PROFILE__INIT;
  Perftools__Profiles__ValueType types[MAX_SAMPLE_TYPES], period_type;
  Perftools__Profiles__ValueType *type_ptrs[MAX_SAMPLE_TYPES];
  Perftools__Profiles__Sample *samples = NULL, **sample_ptrs = NULL;
  Perftools__Profiles__Label *labels = NULL, **label_ptrs = NULL;
  Perftools__Profiles__Mapping *mappings = NULL, **mapping_ptrs = NULL;
  Perftools__Profiles__Location *locations = NULL, **location_ptrs = NULL;
  Perftools__Profiles__Line *lines = NULL, **line_ptrs = NULL;
  Perftools__Profiles__Function *functions = NULL, **function_ptrs = NULL;
  uint8_t *packed = NULL;
  size_t n, i;
  int ret = -ENOMEM;

  *out = NULL;
  *len = 0;
  if (b->failed)
    return -ENOMEM;
  if (b->samples.n && !b->n_types)
    return -EINVAL;

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

  /* One array of messages and one of pointers per kind: protobuf-c wants pointer arrays. */
  n = b->samples.n;
  samples = calloc(n ? n : 1, sizeof(*samples));
  sample_ptrs = calloc(n ? n : 1, sizeof(*sample_ptrs));
  labels = calloc(b->sample_labels.n ? b->sample_labels.n : 1, sizeof(*labels));
  label_ptrs = calloc(b->sample_labels.n ? b->sample_labels.n : 1, sizeof(*label_ptrs));
  if (!samples || !sample_ptrs || !labels || !label_ptrs)
    goto out;
  for (i = 0; i < b->sample_labels.n; i++) {
    perftools__profiles__label__init(&labels[i]);
    labels[i].key = b->sample_labels.v[i].key;
    labels[i].str = b->sample_labels.v[i].str;
    labels[i].num = b->sample_labels.v[i].num;
    labels[i].num_unit = b->sample_labels.v[i].num_unit;
    label_ptrs[i] = &labels[i];
  }
  for (i = 0; i < n; i++) {
    const struct sample *s = &b->samples.v[i];
    perftools__profiles__sample__init(&samples[i]);
    samples[i].n_location_id = s->n_locs;
    samples[i].location_id = b->sample_locs.v + s->loc_off;
    samples[i].n_value = b->n_types;
    samples[i].value = b->sample_values.v + i * b->n_types;
    samples[i].n_label = s->n_labels;
    samples[i].label = label_ptrs + s->label_off;
    sample_ptrs[i] = &samples[i];
  }
  p.n_sample = n;
  p.sample = sample_ptrs;

  n = b->mappings.n;
  mappings = calloc(n ? n : 1, sizeof(*mappings));
  mapping_ptrs = calloc(n ? n : 1, sizeof(*mapping_ptrs));
  if (!mappings || !mapping_ptrs)
    goto out;
  for (i = 0; i < n; i++) {
    const struct mapping *m = &b->mappings.v[i];
    perftools__profiles__mapping__init(&mappings[i]);
    mappings[i].id = i + 1;
    mappings[i].memory_start = m->memory_start;
    mappings[i].memory_limit = m->memory_limit;
    mappings[i].file_offset = m->file_offset;
    mappings[i].filename = m->filename;
    mappings[i].build_id = m->build_id;
    mappings[i].has_functions = m->has_functions;
    mapping_ptrs[i] = &mappings[i];
  }
  p.n_mapping = n;
  p.mapping = mapping_ptrs;

  n = b->locations.n;
  locations = calloc(n ? n : 1, sizeof(*locations));
  location_ptrs = calloc(n ? n : 1, sizeof(*location_ptrs));
  lines = calloc(n ? n : 1, sizeof(*lines));
  line_ptrs = calloc(n ? n : 1, sizeof(*line_ptrs));
  if (!locations || !location_ptrs || !lines || !line_ptrs)
    goto out;
  for (i = 0; i < n; i++) {
    const struct location *l = &b->locations.v[i];
    perftools__profiles__location__init(&locations[i]);
    locations[i].id = i + 1;
    locations[i].mapping_id = l->mapping_id;
    locations[i].address = l->address;
    if (l->function_id) {
      perftools__profiles__line__init(&lines[i]);
      lines[i].function_id = l->function_id;
      lines[i].line = l->line;
      line_ptrs[i] = &lines[i];
      locations[i].n_line = 1;
      locations[i].line = &line_ptrs[i];
    }
    location_ptrs[i] = &locations[i];
  }
  p.n_location = n;
  p.location = location_ptrs;

  n = b->functions.n;
  functions = calloc(n ? n : 1, sizeof(*functions));
  function_ptrs = calloc(n ? n : 1, sizeof(*function_ptrs));
  if (!functions || !function_ptrs)
    goto out;
  for (i = 0; i < n; i++) {
    const struct function *f = &b->functions.v[i];
    perftools__profiles__function__init(&functions[i]);
    functions[i].id = i + 1;
    functions[i].name = f->name;
    functions[i].system_name = f->name;
    functions[i].filename = f->filename;
    functions[i].start_line = f->start_line;
    function_ptrs[i] = &functions[i];
  }
  p.n_function = n;
  p.function = function_ptrs;

  /* Last: every string above is interned by now. */
  p.n_string_table = b->strings.n;
  p.string_table = (char **)b->strings.v;

  n = perftools__profiles__profile__get_packed_size(&p);
  packed = malloc(n ? n : 1);
  if (!packed)
    goto out;
  perftools__profiles__profile__pack(&p, packed);
  ret = gzip(packed, n, level, out, len);
out:
  free(packed);
  free(samples);
  free(sample_ptrs);
  free(labels);
  free(label_ptrs);
  free(mappings);
  free(mapping_ptrs);
  free(locations);
  free(location_ptrs);
  free(lines);
  free(line_ptrs);
  free(functions);
  free(function_ptrs);
  return ret;
}
