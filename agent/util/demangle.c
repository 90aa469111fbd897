/* Demangling of C++ / CUDA kernel names, with a per-owner cache of the results. */
#include "agent/util/demangle.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/util/hash.h"

/* From the C++ runtime (libstdc++), linked into the agent: every CUDA process has it. */
extern char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

/* Lookups by the caller's pointer before hashing the name (a direct-mapped front). */
#define DEMANGLE_PTR_SLOTS 256u

struct dm_entry {
  char *name;      /* our copy of the mangled name; NULL: empty slot */
  char *demangled; /* NULL: it does not demangle (name is returned) */
};

struct dm_ptr {
  const char *ptr;    /* the caller's string */
  const char *name;   /* the entry's copy, to confirm the pointer still holds that name */
  const char *result; /* what demangle_cache_get returned for it */
};

struct demangle_cache {
  struct dm_entry *tab; /* open addressing, a power of two */
  size_t cap, used, max;
  struct dm_ptr ptrs[DEMANGLE_PTR_SLOTS];
};

char *demangle_alloc(const char *name)
{
  int status = -1;
  char *out;

  /* "_Z..." is C++ (and CUDA C++ kernels); nothing else is mangled in a way we can undo. */
  if (!name || strncmp(name, "_Z", 2) != 0)
    return NULL;
  out = __cxa_demangle(name, NULL, NULL, &status);
  if (status != 0) {
    free(out);
    return NULL;
  }
  return out;
}

struct demangle_cache *demangle_cache_new(size_t max_names)
{
  struct demangle_cache *c = calloc(1, sizeof(*c));

  if (c)
    c->max = max_names;
  return c;
}

void demangle_cache_free(struct demangle_cache *c)
{
  if (!c)
    return;
  for (size_t i = 0; i < c->cap; i++) {
    free(c->tab[i].name);
    free(c->tab[i].demangled);
  }
  free(c->tab);
  free(c);
}

size_t demangle_cache_count(const struct demangle_cache *c)
{
  return c ? c->used : 0;
}

static int grow(struct demangle_cache *c)
{
  size_t cap = c->cap ? c->cap * 2 : 64;
  struct dm_entry *t = calloc(cap, sizeof(*t));

  if (!t)
    return -1;
  for (size_t j = 0; j < c->cap; j++) {
    size_t i;
    if (!c->tab[j].name)
      continue;
    for (i = hash_str(c->tab[j].name) & (cap - 1); t[i].name; i = (i + 1) & (cap - 1)) {
    }
    t[i] = c->tab[j];
  }
  free(c->tab);
  c->tab = t;
  c->cap = cap;
  return 0;
}

static const char *entry_result(const struct dm_entry *e)
{
  return e->demangled ? e->demangled : e->name;
}

const char *demangle_cache_get(struct demangle_cache *c, const char *name)
{
  struct dm_ptr *p;
  struct dm_entry *e;
  size_t i;

  if (!name || strncmp(name, "_Z", 2) != 0 || !c)
    return name;
  /* The strcmp guards against a pointer that now holds another name (a module's strings
   * freed and the memory reused): cheaper than hashing, and a mismatch just looks it up. */
  p = &c->ptrs[(uint32_t)(hash_u64((uint64_t)(uintptr_t)name) & (DEMANGLE_PTR_SLOTS - 1))];
  if (p->ptr == name && !strcmp(p->name, name))
    return p->result;
  if ((c->used + 1) * 2 > c->cap && grow(c))
    return name;
  for (i = hash_str(name) & (c->cap - 1); c->tab[i].name; i = (i + 1) & (c->cap - 1))
    if (!strcmp(c->tab[i].name, name))
      goto found;
  /* Full: the name is its own result. Not remembered by pointer: the memory may later hold a
   * name the table has, which must then come back demangled like everywhere else. */
  if (c->max && c->used >= c->max)
    return name;
  c->tab[i].name = strdup(name);
  if (!c->tab[i].name)
    return name;
  c->tab[i].demangled = demangle_alloc(name);
  c->used++;
found:
  e = &c->tab[i];
  p->ptr = name;
  p->name = e->name;
  p->result = entry_result(e);
  return p->result;
}
