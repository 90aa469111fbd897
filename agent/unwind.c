/* Native stack capture on application threads: libunwind's fast path, minus the agent's frames. */
#define LOG_MODULE "stacks"
#define UNW_LOCAL_ONLY
#include "agent/unwind.h"

#include <dlfcn.h>
#include <libunwind.h>
#include <link.h>
#include <stdatomic.h>
#include <string.h>

#include "agent/stack.h"
#include "agent/util/log.h"

#define MAX_RANGES 32

struct range {
  uintptr_t lo, hi;
};

/* Appended under init (or by the rare late add); readers load the count with acquire. */
static struct range ranges[MAX_RANGES];
static _Atomic int n_ranges;

struct find_arg {
  const char *const *names;
  uintptr_t addr; /* or 0 */
};

static void add_range(uintptr_t lo, uintptr_t hi)
{
  int n = atomic_load_explicit(&n_ranges, memory_order_relaxed);

  for (int i = 0; i < n; i++)
    if (ranges[i].lo == lo && ranges[i].hi == hi)
      return;
  if (n == MAX_RANGES)
    return;
  ranges[n].lo = lo;
  ranges[n].hi = hi;
  atomic_store_explicit(&n_ranges, n + 1, memory_order_release);
}

static int name_matches(const char *path, const char *const *names)
{
  const char *base = strrchr(path, '/');

  base = base ? base + 1 : path;
  for (; names && *names; names++)
    if (!strncmp(base, *names, strlen(*names)))
      return 1;
  return 0;
}

/* Adds the executable segments of matching modules. */
static int on_module(struct dl_phdr_info *info, size_t size, void *data)
{
  struct find_arg *arg = data;
  int match = 0;

  (void)size;
  if (arg->addr) {
    for (int i = 0; i < info->dlpi_phnum && !match; i++) {
      const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
      uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
      match = ph->p_type == PT_LOAD && arg->addr >= lo && arg->addr < lo + ph->p_memsz;
    }
  } else {
    match = info->dlpi_name && info->dlpi_name[0] && name_matches(info->dlpi_name, arg->names);
  }
  if (!match)
    return 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X))
      add_range(info->dlpi_addr + ph->p_vaddr, info->dlpi_addr + ph->p_vaddr + ph->p_memsz);
  }
  return arg->addr ? 1 : 0;
}

void unwind_add_skip_module(const void *addr)
{
  struct find_arg arg = {NULL, (uintptr_t)addr};

  if (addr)
    dl_iterate_phdr(on_module, &arg);
}

void unwind_init(const char *const *skip_names, const void *const *anchors)
{
  struct find_arg arg = {skip_names, 0};

  /* Per-thread caches: no global lock inside libunwind on the fast path. */
  unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_PER_THREAD);
  unw_set_cache_size(unw_local_addr_space, 1024, 0);
  unwind_add_skip_module((const void *)(uintptr_t)unwind_init);
  for (; anchors && *anchors; anchors++)
    unwind_add_skip_module(*anchors);
  if (skip_names)
    dl_iterate_phdr(on_module, &arg);
  log_debug("%d code ranges are skipped at the leaf of captured stacks", atomic_load(&n_ranges));
}

int unwind_is_skipped(uint64_t addr)
{
  int n = atomic_load_explicit(&n_ranges, memory_order_acquire);

  for (int i = 0; i < n; i++)
    if (addr >= ranges[i].lo && addr < ranges[i].hi)
      return 1;
  return 0;
}

/*
 * Return addresses known to have unwind information, per thread (direct-mapped): checking it
 * costs libunwind a lookup through dl_iterate_phdr, ~100 times a cached unw_step. Keyed by
 * address only, so an entry outlives a dlclose; harmless where libunwind's unw_get_proc_info
 * never fails (x86-64, below): every address passes, and a library loaded later at the same
 * addresses is stepped as it would be on a fresh thread (tests/stacks/stacks_unwind_reload.c).
 */
#define CHECKED_SLOTS 1024
static __thread uint64_t checked[CHECKED_SLOTS];

static int has_unwind_info(unw_cursor_t *cursor, uint64_t ip)
{
  unsigned slot = (unsigned)((ip * 0x9e3779b97f4a7c15ull) >> 54) & (CHECKED_SLOTS - 1);
  unw_proc_info_t pi;

  if (checked[slot] == ip)
    return 1;
  if (unw_get_proc_info(cursor, &pi) != 0)
    return 0;
  checked[slot] = ip;
  return 1;
}

static int safe_mode;

void unwind_set_safe(int safe)
{
  safe_mode = safe;
}

/* libunwind's fast path (its per-thread trace cache): ~10 ns a frame once warm. */
static int capture_fast(uint64_t *frames, int max)
{
  void *buf[STACK_MAX_DEPTH + UNWIND_SKIP_SLACK];
  int n, skip = 0, out = 0;

  n = unw_backtrace(buf, max + UNWIND_SKIP_SLACK);
  while (skip < n && unwind_is_skipped((uint64_t)(uintptr_t)buf[skip]))
    skip++;
  for (int i = skip; i < n && out < max && buf[i]; i++)
    frames[out++] = (uint64_t)(uintptr_t)buf[i];
  return out;
}

/*
 * The safe mode: stepping ourselves, every step validates the memory it reads (libunwind probes
 * each address with system calls, which is what makes this mode ~40 times slower: ~400 ns a
 * frame). The fast path validates only from the first guessed frame on (agent/unwind.h). The
 * stack ends at a frame unw_get_proc_info has no information for; libunwind 1.6 on x86-64 never
 * says so (for an address without an FDE it reports a one-byte procedure at that address and
 * returns success), so there such a frame is stepped by the validated frame-pointer guess, as
 * tests/stacks (stacks_native) allows.
 */
static int capture_safe(uint64_t *frames, int max)
{
  unw_context_t uc;
  unw_cursor_t cursor;
  int out = 0, leading = 1, budget;

  if (unw_getcontext(&uc) != 0 || unw_init_local(&cursor, &uc) != 0)
    return 0;
  for (budget = max + UNWIND_SKIP_SLACK; budget > 0 && out < max; budget--) {
    unw_word_t ip = 0;

    if (unw_get_reg(&cursor, UNW_REG_IP, &ip) != 0 || !ip)
      break;
    if (leading && unwind_is_skipped(ip)) {
      /* the agent's, CUPTI's and the driver's own frames: never the user's */
    } else {
      leading = 0;
      frames[out++] = ip;
    }
    if (!has_unwind_info(&cursor, ip) || unw_step(&cursor) <= 0)
      break;
  }
  return out;
}

int unwind_capture(uint64_t *frames, int max)
{
  if (max > STACK_MAX_DEPTH)
    max = STACK_MAX_DEPTH;
  if (max <= 0)
    return 0;
  return safe_mode ? capture_safe(frames, max) : capture_fast(frames, max);
}
