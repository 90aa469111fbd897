/* Live GPU memory: address (or VMM handle) -> allocation, with per-device in-use and peak bytes. */
#include "agent/alloc_map.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "agent/util/hash.h"

#define INITIAL_SLOTS 1024

/* Slot spaces beyond the public ones (slot.space = value + 1). */
#define SPACE_VMM_MAP 2    /* key: mapped address; not an allocation */
#define SPACE_VMM_ORPHAN 3 /* key: serial; a released VMM handle whose memory is still mapped */
#define SP(space) ((uint8_t)((space) + 1))

struct slot {
  uint64_t key;
  uint64_t size; /* a mapping: its length */
  const char *api;
  uint32_t corr_id;
  uint32_t stack_id;
  int16_t device;
  uint8_t kind;
  uint8_t space;           /* enum alloc_space + 1, or SP(SPACE_VMM_*); 0 = empty */
  uint8_t inuse_stackless; /* counted in its in-use group without the stack (groups full) */
  union {
    /* A VMM handle (or orphan): who still holds its memory (alloc_map_vmm_*). The serial
     * names it for its mappings even after the handle value is released and reused. */
    struct {
      uint64_t serial;
      uint32_t refs, maps;
    } h;
    /* A VMM mapping: the handle it maps. */
    struct {
      uint64_t handle, serial;
    } map;
  } vmm;
};

/* A group of allocations counted for the pprof windows (alloc_map_window). */
struct count_slot {
  const char *api;
  uint64_t count, bytes;
  uint32_t stack_id;
  int16_t device;
  uint8_t kind;
  uint8_t used;
};

struct count_table {
  struct count_slot *slots;
  size_t cap, used; /* cap: 0 or a power of two */
};

struct alloc_map {
  pthread_mutex_t lock;
  struct slot *slots;
  size_t cap; /* power of two */
  size_t used;
  size_t max_entries;
  struct alloc_map_stats stats;
  size_t n_maps;       /* slots that are VMM mappings (not allocations) */
  uint64_t vmm_serial; /* last serial given to a VMM handle */
  /* Double-buffered: inserts count into counts[active] under the lock; alloc_map_window
   * switches `active` under the lock and reads the other table without it (no inserter
   * touches it any more, and there is only one window taker). */
  struct count_table counts[2];
  int active;
  uint64_t count_overflow;
  /* Live allocations grouped the same way, kept as they come and go: a window's cut reads
   * the groups (few) instead of scanning every live allocation under the lock. */
  struct count_table inuse;
};

const char *alloc_kind_name(enum alloc_kind kind)
{
  static const char *const names[ALLOC_KIND_COUNT] = {"device", "pinned", "managed", "async",
                                                      "vmm"};
  return (unsigned)kind < ALLOC_KIND_COUNT ? names[kind] : "?";
}

struct alloc_map *alloc_map_new(size_t max_entries)
{
  struct alloc_map *m = calloc(1, sizeof(*m));

  if (!m)
    return NULL;
  m->cap = INITIAL_SLOTS;
  m->max_entries = max_entries ? max_entries : ALLOC_MAP_DEFAULT_MAX;
  m->slots = calloc(m->cap, sizeof(*m->slots));
  if (!m->slots) {
    free(m);
    return NULL;
  }
  pthread_mutex_init(&m->lock, NULL);
  return m;
}

void alloc_map_free(struct alloc_map *m)
{
  if (!m)
    return;
  pthread_mutex_destroy(&m->lock);
  free(m->slots);
  free(m->counts[0].slots);
  free(m->counts[1].slots);
  free(m->inuse.slots);
  free(m);
}

static size_t slot_of(const struct alloc_map *m, uint8_t space, uint64_t key)
{
  return (size_t)hash_u64(key ^ ((uint64_t)space << 59)) & (m->cap - 1);
}

/* Index of the slot holding (space, key), or of the empty slot that ends its probe chain. */
static size_t probe(const struct alloc_map *m, uint8_t space, uint64_t key)
{
  size_t i = slot_of(m, space, key);

  while (m->slots[i].space && !(m->slots[i].space == space && m->slots[i].key == key))
    i = (i + 1) & (m->cap - 1);
  return i;
}

static int grow(struct alloc_map *m)
{
  size_t old_cap = m->cap;
  struct slot *old = m->slots;
  struct slot *fresh = calloc(old_cap * 2, sizeof(*fresh));

  if (!fresh)
    return -ENOMEM;
  m->slots = fresh;
  m->cap = old_cap * 2;
  for (size_t i = 0; i < old_cap; i++)
    if (old[i].space)
      m->slots[probe(m, old[i].space, old[i].key)] = old[i];
  free(old);
  return 0;
}

/* Backward-shift deletion keeps linear probing chains intact without tombstones. */
static void erase(struct alloc_map *m, size_t i)
{
  size_t mask = m->cap - 1;
  size_t j = i;

  for (;;) {
    j = (j + 1) & mask;
    if (!m->slots[j].space)
      break;
    size_t home = slot_of(m, m->slots[j].space, m->slots[j].key);
    /* Move j into the hole at i unless its home lies cyclically in (i, j]. */
    if ((j > i && (home <= i || home > j)) || (j < i && (home <= i && home > j))) {
      m->slots[i] = m->slots[j];
      i = j;
    }
  }
  memset(&m->slots[i], 0, sizeof(m->slots[i]));
  m->used--;
}

static struct alloc_device_stats *dev_stats(struct alloc_map *m, int32_t device)
{
  if (device < ALLOC_DEVICE_HOST || device >= ALLOC_MAX_DEVICES)
    return NULL;
  return &m->stats.dev[device + 1];
}

static struct count_slot *count_probe(struct count_table *t, uint32_t stack_id, const char *api,
                                      int16_t device, uint8_t kind);

static void account_free(struct alloc_map *m, const struct slot *s)
{
  struct alloc_device_stats *d = dev_stats(m, s->device);
  struct count_slot *c;

  d->frees++;
  d->bytes_freed += s->size;
  d->in_use -= s->size;
  if (!m->inuse.cap)
    return;
  c = count_probe(&m->inuse, s->inuse_stackless ? 0 : s->stack_id, s->api, s->device, s->kind);
  /* Absent only if its group could not be allocated when it was inserted. */
  if (c->used && c->count) {
    c->count--;
    c->bytes -= s->size;
  }
}

static uint64_t count_hash(uint32_t stack_id, const char *api, int16_t device, uint8_t kind)
{
  return hash_u64((uint64_t)stack_id << 32 ^ (uint64_t)(uintptr_t)api ^
                  (uint64_t)(uint16_t)device << 16 ^ kind);
}

static struct count_slot *count_probe(struct count_table *t, uint32_t stack_id, const char *api,
                                      int16_t device, uint8_t kind)
{
  size_t i = count_hash(stack_id, api, device, kind) & (t->cap - 1);

  while (t->slots[i].used && !(t->slots[i].stack_id == stack_id && t->slots[i].api == api &&
                               t->slots[i].device == device && t->slots[i].kind == kind))
    i = (i + 1) & (t->cap - 1);
  return &t->slots[i];
}

static int count_grow(struct count_table *t)
{
  size_t cap = t->cap ? t->cap * 2 : 256;
  struct count_slot *old = t->slots, *fresh = calloc(cap, sizeof(*fresh));
  size_t old_cap = t->cap;

  if (!fresh)
    return -ENOMEM;
  t->slots = fresh;
  t->cap = cap;
  for (size_t i = 0; i < old_cap; i++)
    if (old[i].used)
      *count_probe(t, old[i].stack_id, old[i].api, old[i].device, old[i].kind) = old[i];
  free(old);
  return 0;
}

/*
 * Under the lock: info's group in t, added if new. Allocation APIs are slow (microseconds and
 * up), so a malloc here when a new group appears is noise; a full table drops the stack
 * (*stackless = 1) rather than grow without bound. NULL when out of memory.
 */
static struct count_slot *count_group(struct count_table *t, const struct alloc_info *info,
                                      int *stackless)
{
  uint32_t stack_id = info->stack_id;
  int16_t device = (int16_t)info->device;
  struct count_slot *c;

  *stackless = 0;
  if (!t->cap && count_grow(t))
    return NULL;
  c = count_probe(t, stack_id, info->api, device, info->kind);
  if (!c->used && stack_id && t->used >= ALLOC_COUNT_MAX_GROUPS) {
    /* Stack-less groups are few (APIs x devices x kinds): those may still be added. */
    *stackless = 1;
    stack_id = 0;
    c = count_probe(t, stack_id, info->api, device, info->kind);
  }
  if (!c->used) {
    if ((t->used + 1) * 2 > t->cap) {
      if (count_grow(t))
        return NULL;
      c = count_probe(t, stack_id, info->api, device, info->kind);
    }
    c->used = 1;
    c->stack_id = stack_id;
    c->api = info->api;
    c->device = device;
    c->kind = info->kind;
    t->used++;
  }
  return c;
}

static void count_alloc(struct alloc_map *m, const struct alloc_info *info, struct slot *s)
{
  struct count_slot *c;
  int stackless;

  if ((c = count_group(&m->counts[m->active], info, &stackless))) {
    m->count_overflow += (uint64_t)stackless;
    c->count++;
    c->bytes += info->size;
  }
  /* In use from now until its free. Without memory for the group, the allocation still counts
   * in the stack-less group (which exists for every API once one was seen, or is created). */
  c = count_group(&m->inuse, info, &stackless);
  s->inuse_stackless = (uint8_t)stackless;
  if (c) {
    c->count++;
    c->bytes += info->size;
  }
}

int alloc_map_insert(struct alloc_map *m, enum alloc_space space, uint64_t key,
                     const struct alloc_info *info)
{
  uint8_t sp = (uint8_t)(space + 1);
  struct alloc_device_stats *d;
  struct slot *s;
  size_t i;
  int ret = 0;

  pthread_mutex_lock(&m->lock);
  d = dev_stats(m, info->device);
  if (!d || info->kind >= ALLOC_KIND_COUNT) {
    m->stats.untracked++;
    ret = -ENOSPC;
    goto out;
  }
  i = probe(m, sp, key);
  s = &m->slots[i];
  if (s->space) {
    /* Same key still live: its free went unseen (e.g. made before the agent attached
     * through a path we do not trace). The new allocation supersedes it. */
    m->stats.replaced++;
    account_free(m, s);
  } else {
    if (m->used >= m->max_entries) {
      m->stats.untracked++;
      ret = -ENOSPC;
      goto out;
    }
    /* Keep the load factor under 1/2 so probe chains stay short. */
    if ((m->used + 1) * 2 > m->cap) {
      if (grow(m)) {
        m->stats.untracked++;
        ret = -ENOSPC;
        goto out;
      }
      i = probe(m, sp, key);
      s = &m->slots[i];
    }
    m->used++;
  }
  s->key = key;
  s->space = sp;
  s->size = info->size;
  s->api = info->api;
  s->corr_id = info->corr_id;
  s->stack_id = info->stack_id;
  s->device = (int16_t)info->device;
  s->kind = info->kind;
  memset(&s->vmm, 0, sizeof(s->vmm));
  if (space == ALLOC_SPACE_VMM_HANDLE) {
    s->vmm.h.serial = ++m->vmm_serial;
    s->vmm.h.refs = 1;
  }

  d->allocs++;
  d->bytes_allocated += info->size;
  d->by_kind[info->kind] += info->size;
  d->in_use += info->size;
  if (d->in_use > d->peak_in_use)
    d->peak_in_use = d->in_use;
  count_alloc(m, info, s);
out:
  pthread_mutex_unlock(&m->lock);
  return ret;
}

static void fill_info(const struct slot *s, struct alloc_info *out)
{
  out->size = s->size;
  out->device = s->device;
  out->kind = s->kind;
  out->corr_id = s->corr_id;
  out->api = s->api;
  out->stack_id = s->stack_id;
}

int alloc_map_remove(struct alloc_map *m, enum alloc_space space, uint64_t key,
                     struct alloc_info *out)
{
  uint8_t sp = (uint8_t)(space + 1);
  size_t i;
  int ret = 0;

  pthread_mutex_lock(&m->lock);
  i = probe(m, sp, key);
  if (!m->slots[i].space) {
    m->stats.unknown_frees++;
    ret = -ENOENT;
    goto out;
  }
  if (out)
    fill_info(&m->slots[i], out);
  account_free(m, &m->slots[i]);
  erase(m, i);
out:
  pthread_mutex_unlock(&m->lock);
  return ret;
}

int alloc_map_lookup(struct alloc_map *m, enum alloc_space space, uint64_t key,
                     struct alloc_info *out)
{
  size_t i;
  int ret = 0;

  pthread_mutex_lock(&m->lock);
  i = probe(m, (uint8_t)(space + 1), key);
  if (!m->slots[i].space)
    ret = -ENOENT;
  else if (out)
    fill_info(&m->slots[i], out);
  pthread_mutex_unlock(&m->lock);
  return ret;
}

/* ---- VMM: handles, mappings and the order of release and unmap (under the lock) ---- */

/* The slot of the handle a mapping maps: by handle value while the handle is held, by serial
 * once released; -1 when gone (freed, or replaced by an allocation made at its key). */
static long vmm_find_handle(struct alloc_map *m, uint64_t handle, uint64_t serial)
{
  size_t i = probe(m, SP(ALLOC_SPACE_VMM_HANDLE), handle);

  if (m->slots[i].space && m->slots[i].vmm.h.serial == serial)
    return (long)i;
  i = probe(m, SP(SPACE_VMM_ORPHAN), serial);
  return m->slots[i].space ? (long)i : -1;
}

/* Moves slot i to (space, key); the caller knows that key is free. */
static void rekey(struct alloc_map *m, size_t i, uint8_t space, uint64_t key)
{
  struct slot tmp = m->slots[i];
  size_t j;

  erase(m, i);
  tmp.space = space;
  tmp.key = key;
  j = probe(m, space, key);
  m->slots[j] = tmp;
  m->used++;
}

/* A reference or a mapping of handle slot i was dropped: free its memory if it was the last,
 * or, once no handle reference is left, move it out of the way of a new handle with the same
 * value (its mappings find it by serial). */
static void vmm_settle(struct alloc_map *m, size_t i)
{
  struct slot *s = &m->slots[i];

  if (s->vmm.h.refs == 0 && s->vmm.h.maps == 0) {
    account_free(m, s);
    erase(m, i);
  } else if (s->vmm.h.refs == 0 && s->space == SP(ALLOC_SPACE_VMM_HANDLE)) {
    rekey(m, i, SP(SPACE_VMM_ORPHAN), s->vmm.h.serial);
  }
}

/* Removes mapping slot i and drops its handle's mapping count. */
static void vmm_drop_mapping(struct alloc_map *m, size_t i)
{
  uint64_t handle = m->slots[i].vmm.map.handle, serial = m->slots[i].vmm.map.serial;
  long h;

  erase(m, i);
  m->n_maps--;
  h = vmm_find_handle(m, handle, serial);
  if (h >= 0 && m->slots[h].vmm.h.maps) {
    m->slots[h].vmm.h.maps--;
    vmm_settle(m, (size_t)h);
  }
}

int alloc_map_vmm_map(struct alloc_map *m, uint64_t va, uint64_t size, uint64_t handle)
{
  size_t i, h;
  int ret = 0;

  pthread_mutex_lock(&m->lock);
  h = probe(m, SP(ALLOC_SPACE_VMM_HANDLE), handle);
  if (!m->slots[h].space) {
    ret = -ENOENT;
    goto out;
  }
  /* A mapping at va whose unmap went unseen: it is gone now. */
  i = probe(m, SP(SPACE_VMM_MAP), va);
  if (m->slots[i].space)
    vmm_drop_mapping(m, i);
  if (m->used >= m->max_entries || ((m->used + 1) * 2 > m->cap && grow(m))) {
    /* Not remembered: the memory then goes with its last cuMemRelease, as if unmapped. */
    m->stats.untracked++;
    ret = -ENOSPC;
    goto out;
  }
  h = probe(m, SP(ALLOC_SPACE_VMM_HANDLE), handle); /* moved by the drop or the growth */
  if (!m->slots[h].space) {
    ret = -ENOENT;
    goto out;
  }
  m->slots[h].vmm.h.maps++;
  i = probe(m, SP(SPACE_VMM_MAP), va);
  memset(&m->slots[i], 0, sizeof(m->slots[i]));
  m->slots[i].key = va;
  m->slots[i].space = SP(SPACE_VMM_MAP);
  m->slots[i].size = size;
  m->slots[i].vmm.map.handle = handle;
  m->slots[i].vmm.map.serial = m->slots[h].vmm.h.serial;
  m->used++;
  m->n_maps++;
out:
  pthread_mutex_unlock(&m->lock);
  return ret;
}

/* Up to max starts of mappings in [from, end), any of them; how many. The table is keyed by
 * start, so this scans it; only an unmapped gap inside an unmap's range (or a range the agent
 * never saw mapped) gets here, never the usual unmap of one mapping or of back-to-back ones. */
static size_t vmm_mappings_in(const struct alloc_map *m, uint64_t from, uint64_t end,
                              uint64_t *keys, size_t max)
{
  size_t n = 0;

  if (!m->n_maps)
    return 0;
  for (size_t i = 0; i < m->cap && n < max; i++) {
    const struct slot *s = &m->slots[i];
    if (s->space == SP(SPACE_VMM_MAP) && s->key >= from && s->key < end)
      keys[n++] = s->key;
  }
  return n;
}

/* cuMemUnmap takes whole mappings: every one inside the range goes, back to back or with
 * never-mapped space around them (a reservation unmapped as a whole). */
int alloc_map_vmm_unmap(struct alloc_map *m, uint64_t va, uint64_t size)
{
  uint64_t end = va + size < va ? UINT64_MAX : va + size, keys[256];
  size_t k;
  int n = 0;

  pthread_mutex_lock(&m->lock);
  /* Back-to-back mappings from va: one probe each. */
  while (va < end) {
    size_t i = probe(m, SP(SPACE_VMM_MAP), va);
    uint64_t len = m->slots[i].size;

    if (!m->slots[i].space || !len)
      break;
    vmm_drop_mapping(m, i);
    n++;
    if (va + len < va)
      break;
    va += len;
  }
  /* A gap: the rest are found by scanning, many per scan (one scan per mapping would hold the
   * lock for seconds when a range holds thousands of mappings with gaps between them). */
  while (va < end && (k = vmm_mappings_in(m, va, end, keys, sizeof(keys) / sizeof(keys[0])))) {
    for (size_t j = 0; j < k; j++) {
      size_t i = probe(m, SP(SPACE_VMM_MAP), keys[j]);
      if (m->slots[i].space) {
        vmm_drop_mapping(m, i);
        n++;
      }
    }
  }
  pthread_mutex_unlock(&m->lock);
  return n;
}

/* The mapping whose range holds va, SIZE_MAX if none. cuMemRetainAllocationHandle takes any
 * address inside a mapping; the table is keyed by start, so this scans it. Retains are rare
 * (one per exported or freed segment), unlike the calls that key by start. */
static size_t vmm_mapping_at(const struct alloc_map *m, uint64_t va)
{
  if (!m->n_maps)
    return SIZE_MAX;
  for (size_t i = 0; i < m->cap; i++) {
    const struct slot *s = &m->slots[i];
    if (s->space == SP(SPACE_VMM_MAP) && va >= s->key && va - s->key < s->size)
      return i;
  }
  return SIZE_MAX;
}

int alloc_map_vmm_retain(struct alloc_map *m, uint64_t va)
{
  size_t i;
  long h;
  int ret = -ENOENT;

  pthread_mutex_lock(&m->lock);
  i = probe(m, SP(SPACE_VMM_MAP), va);
  if (!m->slots[i].space && (i = vmm_mapping_at(m, va)) == SIZE_MAX)
    goto out;
  h = vmm_find_handle(m, m->slots[i].vmm.map.handle, m->slots[i].vmm.map.serial);
  if (h < 0)
    goto out;
  if (m->slots[h].space == SP(SPACE_VMM_ORPHAN)) {
    /* Released, and now held again under its handle value, unless a new handle has it. */
    uint64_t handle = m->slots[i].vmm.map.handle;
    if (m->slots[probe(m, SP(ALLOC_SPACE_VMM_HANDLE), handle)].space)
      goto out;
    m->slots[h].vmm.h.refs++;
    rekey(m, (size_t)h, SP(ALLOC_SPACE_VMM_HANDLE), handle);
  } else {
    m->slots[h].vmm.h.refs++;
  }
  ret = 0;
out:
  pthread_mutex_unlock(&m->lock);
  return ret;
}

int alloc_map_vmm_release(struct alloc_map *m, uint64_t handle)
{
  size_t i;
  int ret = 0;

  pthread_mutex_lock(&m->lock);
  i = probe(m, SP(ALLOC_SPACE_VMM_HANDLE), handle);
  if (!m->slots[i].space) {
    m->stats.unknown_frees++;
    ret = -ENOENT;
    goto out;
  }
  if (m->slots[i].vmm.h.refs)
    m->slots[i].vmm.h.refs--;
  vmm_settle(m, i);
out:
  pthread_mutex_unlock(&m->lock);
  return ret;
}

void alloc_map_get_stats(struct alloc_map *m, struct alloc_map_stats *out)
{
  pthread_mutex_lock(&m->lock);
  *out = m->stats;
  out->live = m->used - m->n_maps;
  pthread_mutex_unlock(&m->lock);
}

void alloc_map_for_each(struct alloc_map *m, void (*fn)(const struct alloc_info *info, void *arg),
                        void *arg)
{
  struct alloc_info info;

  pthread_mutex_lock(&m->lock);
  for (size_t i = 0; i < m->cap; i++) {
    if (!m->slots[i].space || m->slots[i].space == SP(SPACE_VMM_MAP))
      continue;
    fill_info(&m->slots[i], &info);
    fn(&info, arg);
  }
  pthread_mutex_unlock(&m->lock);
}

/* Drops the in-use groups whose allocations were all freed, once they are half the table: a
 * stream of short-lived call paths must not fill it for good. Under the lock. */
static void inuse_compact(struct alloc_map *m)
{
  struct count_table *t = &m->inuse, fresh = {0};
  size_t live = 0;

  for (size_t i = 0; i < t->cap; i++)
    live += t->slots[i].used && t->slots[i].count;
  if (t->used < ALLOC_COUNT_MAX_GROUPS / 2 || live * 2 > t->used)
    return;
  fresh.cap = t->cap;
  if (!(fresh.slots = calloc(fresh.cap, sizeof(*fresh.slots))))
    return;
  for (size_t i = 0; i < t->cap; i++)
    if (t->slots[i].used && t->slots[i].count) {
      const struct count_slot *s = &t->slots[i];
      *count_probe(&fresh, s->stack_id, s->api, s->device, s->kind) = *s;
      fresh.used++;
    }
  free(t->slots);
  *t = fresh;
}

uint64_t alloc_map_window(struct alloc_map *m,
                          void (*inuse)(const struct alloc_count *c, void *arg),
                          void (*allocated)(const struct alloc_count *c, void *arg), void *arg)
{
  struct count_table *t;
  uint64_t overflow;

  pthread_mutex_lock(&m->lock);
  if (inuse) {
    for (size_t i = 0; i < m->inuse.cap; i++) {
      const struct count_slot *s = &m->inuse.slots[i];
      if (s->used && s->count) {
        struct alloc_count c = {s->stack_id, s->device, s->kind, s->api, s->count, s->bytes};
        inuse(&c, arg);
      }
    }
  }
  inuse_compact(m);
  t = &m->counts[m->active];
  m->active ^= 1;
  overflow = m->count_overflow;
  m->count_overflow = 0;
  pthread_mutex_unlock(&m->lock);

  for (size_t i = 0; i < t->cap && t->used; i++) {
    const struct count_slot *s = &t->slots[i];
    if (!s->used)
      continue;
    if (allocated) {
      struct alloc_count c = {s->stack_id, s->device, s->kind, s->api, s->count, s->bytes};
      allocated(&c, arg);
    }
  }
  if (t->used)
    memset(t->slots, 0, t->cap * sizeof(*t->slots));
  t->used = 0;
  return overflow;
}
