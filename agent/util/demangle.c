/* Demangling of C++ / CUDA kernel names, with a per-owner cache of the results. */
#include "agent/util/demangle.h"

#include <libiberty/demangle.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/util/hash.h"

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

/* The output of one demangling: the first DEMANGLE_MAX bytes, and where to go past them. */
struct dm_out {
  char buf[DEMANGLE_MAX + 1];
  size_t len;
  int cut; /* more than DEMANGLE_MAX bytes were printed */
  sigjmp_buf stop;
};

/*
 * libiberty's printer hands its output over in pieces of up to 255 bytes and cannot be told to
 * stop (the callback returns nothing, and a name whose template arguments refer back to each
 * other prints for seconds to years). So past the bound we leave the printer with a longjmp.
 * That is safe in libiberty's callback path (cp-demangle.c: d_demangle_callback,
 * cplus_demangle_print_callback): all its state is in stack frames and variable-length arrays
 * on the stack (components, substitutions, saved scopes, template copies, modifier lists), it
 * takes no lock, touches no global that it writes and allocates nothing (malloc/realloc are
 * only in the growable-string wrappers we do not call). Jumping back drops those frames and
 * nothing else is left.
 */
static void dm_append(const char *s, size_t n, void *opaque)
{
  struct dm_out *o = opaque;
  size_t room = DEMANGLE_MAX - o->len;

  if (n > room) {
    memcpy(o->buf + o->len, s, room);
    o->len = DEMANGLE_MAX;
    o->cut = 1;
    siglongjmp(o->stop, 1);
  }
  memcpy(o->buf + o->len, s, n);
  o->len += n;
}

/* 1 when name demangled into o (whole or cut), 0 when it does not demangle. The state the
 * jump must preserve lives in *o, the caller's, not in this frame's locals. */
static int dm_print(const char *name, struct dm_out *o)
{
  /* No signal mask saved: a syscall each name for nothing (the printer changes none). */
  if (sigsetjmp(o->stop, 0))
    return 1;
  /* __cxa_demangle's options (libstdc++ builds the same cp-demangle.c): the same output.
   * DMGL_NO_RECURSE_LIMIT stays off: names over 1 024 characters are refused and print
   * recursion is bounded, which keeps the stack use small (libiberty's arrays scale with the
   * name); __cxa_demangle refuses the same names. The bound is on output, not time: see
   * docs/TRACES.md, Known limits, for the one shape that still takes long printing nothing. */
  return cplus_demangle_v3_callback(name, DMGL_PARAMS | DMGL_TYPES, dm_append, o) != 0;
}

char *demangle_alloc(const char *name)
{
  struct dm_out o;
  char *out;

  /* "_Z..." is C++ (and CUDA C++ kernels); nothing else is mangled in a way we can undo. */
  if (!name || strncmp(name, "_Z", 2) != 0)
    return NULL;
  o.len = 0;
  o.cut = 0;
  if (!dm_print(name, &o))
    return NULL;
  if (o.cut) {
    size_t keep = DEMANGLE_MAX - 3;

    /* Not inside a UTF-8 sequence (identifiers may hold any; continuation bytes are 10xxxxxx). */
    while (keep > 0 && ((unsigned char)o.buf[keep] & 0xc0) == 0x80)
      keep--;
    memcpy(o.buf + keep, "...", 3);
    o.len = keep + 3;
  }
  o.buf[o.len] = '\0';
  out = malloc(o.len + 1);
  if (out)
    memcpy(out, o.buf, o.len + 1);
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
