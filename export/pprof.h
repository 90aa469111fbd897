/* A pprof profile builder: interned strings, functions, locations, mappings, samples; gzip. */
#ifndef GPUPROF_EXPORT_PPROF_H
#define GPUPROF_EXPORT_PPROF_H

#include <stddef.h>
#include <stdint.h>

/*
 * Builds one profile in memory and encodes it (protobuf-c, gzip) as pprof and Pyroscope read
 * it: string_table[0] is "", ids of mappings and functions are dense 1..N in the order they
 * were added, stacks are leaf first. Location ids are dense 1..N too, but numbered when
 * encoding by how many samples use them (shortest varints for the most used); the ids this
 * API returns are the builder's own. Strings, functions and locations are interned (adding
 * the same one twice returns the same id), so callers need no cache of their own.
 * Ids and string indexes returned are > 0; 0 means "failed" (out of memory): the builder then
 * remembers the error and pprof_builder_encode returns -ENOMEM.
 *
 * Samples are encoded in the order they were added: add those of one stack one after the
 * other (deflate finds the repeated stack only within its 32 KiB window). Consecutive samples
 * whose locations differ only in the first (the leaf) are stored and packed as one run.
 *
 * pprof_builder_reset keeps the memory for the next profile: a builder reused window after
 * window stops allocating once it has seen its largest profile (encoding streams through a
 * fixed buffer into deflate and reuses its zlib stream). Not thread-safe.
 */
struct pprof_builder;

struct pprof_mapping {
  uint64_t memory_start, memory_limit, file_offset;
  const char *filename;
  const char *build_id; /* hex, or NULL */
  int has_functions;
};

/* A sample label: str when non-NULL, else num (with num_unit when non-NULL). */
struct pprof_label {
  const char *key;
  const char *str;
  int64_t num;
  const char *num_unit;
};

struct pprof_builder *pprof_builder_new(void);
void pprof_builder_free(struct pprof_builder *b);
void pprof_builder_reset(struct pprof_builder *b);

/* The string's index in string_table (0 for "" and NULL). */
int64_t pprof_builder_string(struct pprof_builder *b, const char *s);

/* Sample types in column order, all before the first sample (-EINVAL after it); every sample
 * must carry one value per type. */
int pprof_builder_add_sample_type(struct pprof_builder *b, const char *type, const char *unit);
void pprof_builder_set_period(struct pprof_builder *b, const char *type, const char *unit,
                              int64_t period);
void pprof_builder_set_default_sample_type(struct pprof_builder *b, const char *type);
void pprof_builder_set_time(struct pprof_builder *b, int64_t time_nanos, int64_t duration_nanos);
int pprof_builder_add_comment(struct pprof_builder *b, const char *text);

/* Mappings are not interned: the caller adds each module once. */
uint64_t pprof_builder_add_mapping(struct pprof_builder *b, const struct pprof_mapping *m);
/*
 * Interned by (name, system_name, filename). system_name (NULL: none) is the name as linked;
 * pass the name itself for native frames (pprof prints a system name that differs from the
 * name beside it) and NULL for Python frames: `go tool pprof` simplifies a function whose
 * system name is set like a C++ symbol and would turn "<module>" into "<unknown>".
 */
uint64_t pprof_builder_function(struct pprof_builder *b, const char *name, const char *system_name,
                                const char *filename, int64_t start_line);
/* Interned by (mapping, address, function, line); function_id 0 for an address-only location. */
uint64_t pprof_builder_location(struct pprof_builder *b, uint64_t mapping_id, uint64_t address,
                                uint64_t function_id, int64_t line);

/* locations leaf first; values: one per sample type. 0 or -ENOMEM / -EINVAL. */
int pprof_builder_add_sample(struct pprof_builder *b, const uint64_t *location_ids, size_t n_locs,
                             const int64_t *values, size_t n_values,
                             const struct pprof_label *labels, size_t n_labels);

/* A label's id, interned (the same label twice gets the same id), for
 * pprof_builder_add_sample_labels: a caller that adds the same few labels to every sample
 * interns them once per profile. 0 when out of memory. Ids are valid until
 * pprof_builder_reset: after it, an old id may name another label. */
uint64_t pprof_builder_label(struct pprof_builder *b, const struct pprof_label *label);
/* pprof_builder_add_sample with labels given by their ids. */
int pprof_builder_add_sample_labels(struct pprof_builder *b, const uint64_t *location_ids,
                                    size_t n_locs, const int64_t *values, size_t n_values,
                                    const uint64_t *label_ids, size_t n_labels);

size_t pprof_builder_sample_count(const struct pprof_builder *b);
size_t pprof_builder_location_count(const struct pprof_builder *b);

/* The serialized Profile, gzip-compressed, in a malloc'd buffer (*out, *len): the caller frees
 * it. level: zlib's 0..9, or -1 for its default. 0 or -errno. */
int pprof_builder_encode(struct pprof_builder *b, int level, uint8_t **out, size_t *len);

#endif
