/* Unit tests of the live-allocation map (agent/alloc_map.c). */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "agent/alloc_map.h"
#include "unit.h"

static struct alloc_info info(uint64_t size, int32_t device, enum alloc_kind kind)
{
  struct alloc_info i = {.size = size,
                         .device = device,
                         .kind = (uint8_t)kind,
                         .corr_id = 7,
                         .api = "cudaMalloc_v3020"};
  return i;
}

static void test_accounting(void)
{
  struct alloc_map *m = alloc_map_new(0);
  struct alloc_map_stats st;
  struct alloc_info out, in;

  in = info(4096, 0, ALLOC_KIND_DEVICE);
  CHECK_EQ(alloc_map_insert(m, ALLOC_SPACE_VA, 0x7f0000001000, &in), 0);
  in = info(8192, 0, ALLOC_KIND_ASYNC);
  CHECK_EQ(alloc_map_insert(m, ALLOC_SPACE_VA, 0x7f0000100000, &in), 0);
  in = info(100, ALLOC_DEVICE_HOST, ALLOC_KIND_PINNED);
  CHECK_EQ(alloc_map_insert(m, ALLOC_SPACE_VA, 0x5555000, &in), 0);
  /* A VMM handle may equal an address numerically: separate namespaces. */
  in = info(1 << 21, 1, ALLOC_KIND_VMM);
  CHECK_EQ(alloc_map_insert(m, ALLOC_SPACE_VMM_HANDLE, 0x5555000, &in), 0);

  CHECK_EQ(alloc_map_lookup(m, ALLOC_SPACE_VA, 0x7f0000001000, &out), 0);
  CHECK_EQ(out.size, 4096);
  CHECK_EQ(out.corr_id, 7);
  CHECK_STR(out.api, "cudaMalloc_v3020");

  alloc_map_get_stats(m, &st);
  CHECK_EQ(st.live, 4);
  CHECK_EQ(st.dev[1].allocs, 2);
  CHECK_EQ(st.dev[1].in_use, 12288);
  CHECK_EQ(st.dev[1].peak_in_use, 12288);
  CHECK_EQ(st.dev[1].by_kind[ALLOC_KIND_DEVICE], 4096);
  CHECK_EQ(st.dev[1].by_kind[ALLOC_KIND_ASYNC], 8192);
  CHECK_EQ(st.dev[0].in_use, 100); /* host pinned: device -1 */
  CHECK_EQ(st.dev[0].by_kind[ALLOC_KIND_PINNED], 100);
  CHECK_EQ(st.dev[2].by_kind[ALLOC_KIND_VMM], 1 << 21);

  CHECK_EQ(alloc_map_remove(m, ALLOC_SPACE_VA, 0x7f0000001000, &out), 0);
  CHECK_EQ(out.size, 4096);
  CHECK_EQ(alloc_map_remove(m, ALLOC_SPACE_VMM_HANDLE, 0x5555000, NULL), 0);
  /* The pinned block with the same number is still there. */
  CHECK_EQ(alloc_map_lookup(m, ALLOC_SPACE_VA, 0x5555000, NULL), 0);
  /* Unknown and double frees are counted, not fatal. */
  CHECK_EQ(alloc_map_remove(m, ALLOC_SPACE_VA, 0x7f0000001000, NULL), (unsigned long long)-ENOENT);
  CHECK_EQ(alloc_map_remove(m, ALLOC_SPACE_VA, 0xdead, NULL), (unsigned long long)-ENOENT);

  /* Address reuse after a free: a new allocation; peak stays. */
  in = info(1024, 0, ALLOC_KIND_DEVICE);
  CHECK_EQ(alloc_map_insert(m, ALLOC_SPACE_VA, 0x7f0000001000, &in), 0);
  /* Same address again without a free in between: replaces (its free was not seen). */
  in = info(2048, 0, ALLOC_KIND_DEVICE);
  CHECK_EQ(alloc_map_insert(m, ALLOC_SPACE_VA, 0x7f0000001000, &in), 0);

  alloc_map_get_stats(m, &st);
  CHECK_EQ(st.unknown_frees, 2);
  CHECK_EQ(st.replaced, 1);
  CHECK_EQ(st.dev[1].allocs, 4);
  CHECK_EQ(st.dev[1].frees, 2);
  CHECK_EQ(st.dev[1].bytes_allocated, 4096 + 8192 + 1024 + 2048);
  CHECK_EQ(st.dev[1].bytes_freed, 4096 + 1024);
  CHECK_EQ(st.dev[1].in_use, 8192 + 2048);
  CHECK_EQ(st.dev[1].peak_in_use, 12288);
  CHECK_EQ(st.dev[2].in_use, 0);
  CHECK_EQ(st.dev[2].peak_in_use, 1 << 21);

  /* Out-of-range device: not tracked, counted. */
  in = info(1, ALLOC_MAX_DEVICES, ALLOC_KIND_DEVICE);
  CHECK_EQ(alloc_map_insert(m, ALLOC_SPACE_VA, 1, &in), (unsigned long long)-ENOSPC);
  alloc_map_get_stats(m, &st);
  CHECK_EQ(st.untracked, 1);
  alloc_map_free(m);
  alloc_map_free(NULL);
}

/* Many keys with colliding low bits, removed in an interleaved order: probe chains must survive
 * backward-shift deletion and growth. */
static void test_many(void)
{
  struct alloc_map *m = alloc_map_new(0);
  struct alloc_map_stats st;
  const int n = 50000;
  struct alloc_info in = info(256, 3, ALLOC_KIND_DEVICE);

  for (int i = 0; i < n; i++)
    CHECK_EQ(alloc_map_insert(m, ALLOC_SPACE_VA, 0x700000000000ull + (uint64_t)i * 0x200000, &in),
             0);
  for (int i = 0; i < n; i += 2)
    CHECK_EQ(alloc_map_remove(m, ALLOC_SPACE_VA, 0x700000000000ull + (uint64_t)i * 0x200000, NULL),
             0);
  int missing = 0, present = 0;
  for (int i = 0; i < n; i++) {
    int r = alloc_map_lookup(m, ALLOC_SPACE_VA, 0x700000000000ull + (uint64_t)i * 0x200000, NULL);
    if (i % 2 == 0 && r == 0)
      present++;
    if (i % 2 == 1 && r != 0)
      missing++;
  }
  CHECK_EQ(present, 0);
  CHECK_EQ(missing, 0);
  alloc_map_get_stats(m, &st);
  CHECK_EQ(st.live, n / 2);
  CHECK_EQ(st.dev[4].in_use, (uint64_t)(n / 2) * 256);
  CHECK_EQ(st.dev[4].peak_in_use, (uint64_t)n * 256);
  alloc_map_free(m);
}

static void test_limit(void)
{
  struct alloc_map *m = alloc_map_new(3);
  struct alloc_map_stats st;
  struct alloc_info in = info(10, 0, ALLOC_KIND_DEVICE);

  for (uint64_t k = 1; k <= 5; k++)
    alloc_map_insert(m, ALLOC_SPACE_VA, k, &in);
  alloc_map_get_stats(m, &st);
  CHECK_EQ(st.live, 3);
  CHECK_EQ(st.untracked, 2);
  CHECK_EQ(st.dev[1].in_use, 30);
  alloc_map_free(m);
}

static struct alloc_map *shared;

static void *churn(void *arg)
{
  uint64_t base = (uint64_t)(uintptr_t)arg << 40;
  struct alloc_info in = info(64, 0, ALLOC_KIND_DEVICE);

  for (int round = 0; round < 200; round++) {
    for (uint64_t i = 0; i < 100; i++)
      alloc_map_insert(shared, ALLOC_SPACE_VA, base + i * 64, &in);
    for (uint64_t i = 0; i < 100; i++)
      alloc_map_remove(shared, ALLOC_SPACE_VA, base + i * 64, NULL);
  }
  return NULL;
}

static void test_threads(void)
{
  pthread_t th[8];
  struct alloc_map_stats st;

  shared = alloc_map_new(0);
  for (uintptr_t i = 0; i < 8; i++)
    pthread_create(&th[i], NULL, churn, (void *)(i + 1));
  for (int i = 0; i < 8; i++)
    pthread_join(th[i], NULL);
  alloc_map_get_stats(shared, &st);
  CHECK_EQ(st.live, 0);
  CHECK_EQ(st.dev[1].in_use, 0);
  CHECK_EQ(st.dev[1].allocs, 8 * 200 * 100);
  CHECK_EQ(st.unknown_frees, 0);
  CHECK(st.dev[1].peak_in_use >= 100 * 64);
  alloc_map_free(shared);
}

/* In-use and allocated groups of a window cut, summed by stack id (stacks 1..4). */
struct cut {
  uint64_t inuse_count[5], inuse_bytes[5], alloc_count[5], alloc_bytes[5];
  int groups;
};

static void on_inuse(const struct alloc_count *c, void *arg)
{
  struct cut *k = arg;
  k->inuse_count[c->stack_id] += c->count;
  k->inuse_bytes[c->stack_id] += c->bytes;
  k->groups++;
}

static void on_alloc(const struct alloc_count *c, void *arg)
{
  struct cut *k = arg;
  k->alloc_count[c->stack_id] += c->count;
  k->alloc_bytes[c->stack_id] += c->bytes;
}

static void test_window_groups(void)
{
  struct alloc_map *m = alloc_map_new(0);
  struct alloc_info in = info(1000, 0, ALLOC_KIND_DEVICE);
  struct cut k = {0};

  /* Stack 1: three of 1000, one freed. Stack 2: one of 500, then its address is reused
   * by stack 3 (the free was not seen: replaced). */
  in.stack_id = 1;
  for (uint64_t a = 1; a <= 3; a++)
    CHECK_EQ(alloc_map_insert(m, ALLOC_SPACE_VA, a << 20, &in), 0);
  CHECK_EQ(alloc_map_remove(m, ALLOC_SPACE_VA, 2 << 20, NULL), 0);
  in = info(500, 0, ALLOC_KIND_DEVICE);
  in.stack_id = 2;
  CHECK_EQ(alloc_map_insert(m, ALLOC_SPACE_VA, 9 << 20, &in), 0);
  in = info(700, 0, ALLOC_KIND_DEVICE);
  in.stack_id = 3;
  CHECK_EQ(alloc_map_insert(m, ALLOC_SPACE_VA, 9 << 20, &in), 0);
  CHECK_EQ(alloc_map_window(m, on_inuse, on_alloc, &k), 0);
  CHECK_EQ(k.inuse_count[1], 2);
  CHECK_EQ(k.inuse_bytes[1], 2000);
  CHECK_EQ(k.inuse_count[2], 0); /* replaced: no longer in use */
  CHECK_EQ(k.inuse_bytes[3], 700);
  CHECK_EQ(k.groups, 2); /* the emptied group of stack 2 is not reported */
  CHECK_EQ(k.alloc_count[1], 3);
  CHECK_EQ(k.alloc_bytes[1], 3000);
  CHECK_EQ(k.alloc_bytes[2], 500);
  CHECK_EQ(k.alloc_bytes[3], 700);

  /* Next window: stack 1's last two freed, nothing allocated. */
  memset(&k, 0, sizeof(k));
  CHECK_EQ(alloc_map_remove(m, ALLOC_SPACE_VA, 1 << 20, NULL), 0);
  CHECK_EQ(alloc_map_remove(m, ALLOC_SPACE_VA, 3 << 20, NULL), 0);
  CHECK_EQ(alloc_map_window(m, on_inuse, on_alloc, &k), 0);
  CHECK_EQ(k.inuse_count[1], 0);
  CHECK_EQ(k.inuse_bytes[3], 700);
  CHECK_EQ(k.groups, 1);
  CHECK_EQ(k.alloc_count[1] + k.alloc_count[2] + k.alloc_count[3], 0);
  alloc_map_free(m);
}

static uint64_t in_use(struct alloc_map *m, int device)
{
  struct alloc_map_stats st;

  alloc_map_get_stats(m, &st);
  return st.dev[device + 1].in_use;
}

/* VMM memory goes when released and unmapped, in either order (agent/alloc_map.h). */
static void test_vmm_lifetimes(void)
{
  struct alloc_map *m = alloc_map_new(0);
  struct alloc_info in = info(2 << 20, 0, ALLOC_KIND_VMM);
  struct alloc_map_stats st;

  /* Released while mapped twice (CUDA's VMM samples): freed by the second unmap. */
  CHECK_EQ(alloc_map_insert(m, ALLOC_SPACE_VMM_HANDLE, 0x10, &in), 0);
  CHECK_EQ(alloc_map_vmm_map(m, 0x7f0000000000, 2 << 20, 0x10), 0);
  CHECK_EQ(alloc_map_vmm_map(m, 0x7f1000000000, 2 << 20, 0x10), 0);
  CHECK_EQ(alloc_map_vmm_release(m, 0x10), 0);
  CHECK_EQ(in_use(m, 0), 2 << 20);
  /* The handle value is free again: a new cuMemCreate may get it while the old is mapped. */
  in = info(4 << 20, 0, ALLOC_KIND_VMM);
  CHECK_EQ(alloc_map_insert(m, ALLOC_SPACE_VMM_HANDLE, 0x10, &in), 0);
  CHECK_EQ(in_use(m, 0), 6 << 20);
  CHECK_EQ(alloc_map_vmm_unmap(m, 0x7f0000000000, 2 << 20), 1);
  CHECK_EQ(in_use(m, 0), 6 << 20);
  CHECK_EQ(alloc_map_vmm_unmap(m, 0x7f1000000000, 2 << 20), 1);
  CHECK_EQ(in_use(m, 0), 4 << 20); /* the first is gone, the new one is not */
  alloc_map_get_stats(m, &st);
  CHECK_EQ(st.live, 1);
  CHECK_EQ(st.replaced, 0);

  /* NCCL's free: retain (by address), release, unmap, release. Two mappings side by side
   * (an expandable segment) are unmapped by one call over both. */
  CHECK_EQ(alloc_map_vmm_map(m, 0x7f2000000000, 2 << 20, 0x10), 0);
  CHECK_EQ(alloc_map_vmm_map(m, 0x7f2000200000, 2 << 20, 0x10), 0);
  CHECK_EQ(alloc_map_vmm_retain(m, 0x7f2000000000), 0);
  CHECK_EQ(alloc_map_vmm_release(m, 0x10), 0);
  CHECK_EQ(in_use(m, 0), 4 << 20);
  CHECK_EQ(alloc_map_vmm_unmap(m, 0x7f2000000000, 4 << 20), 2);
  CHECK_EQ(in_use(m, 0), 4 << 20); /* unmapped, but one reference is still held */
  CHECK_EQ(alloc_map_vmm_release(m, 0x10), 0);
  CHECK_EQ(in_use(m, 0), 0);

  /* A reservation unmapped as a whole: its range starts in never-mapped space and holds a gap
   * between two mappings (and one mapping past its end, which stays). */
  CHECK_EQ(alloc_map_insert(m, ALLOC_SPACE_VMM_HANDLE, 0x20, &in), 0);
  CHECK_EQ(alloc_map_vmm_map(m, 0x7f4000200000, 2 << 20, 0x20), 0);
  CHECK_EQ(alloc_map_vmm_map(m, 0x7f4000800000, 2 << 20, 0x20), 0);
  CHECK_EQ(alloc_map_vmm_map(m, 0x7f4001000000, 2 << 20, 0x20), 0);
  CHECK_EQ(alloc_map_vmm_release(m, 0x20), 0);
  CHECK_EQ(alloc_map_vmm_unmap(m, 0x7f4000000000, 16 << 20), 2);
  CHECK_EQ(in_use(m, 0), 4 << 20); /* still mapped past the range */
  CHECK_EQ(alloc_map_vmm_unmap(m, 0x7f4001000000, 2 << 20), 1);
  CHECK_EQ(in_use(m, 0), 0);

  /* Mappings of handles never seen, unmaps of ranges never mapped, releases of unknown
   * handles: ignored, the last counted as an unknown free. */
  CHECK_EQ(alloc_map_vmm_map(m, 0x7f3000000000, 2 << 20, 0x99), (unsigned long long)-ENOENT);
  CHECK_EQ(alloc_map_vmm_unmap(m, 0x7f3000000000, 2 << 20), 0);
  CHECK_EQ(alloc_map_vmm_retain(m, 0x7f3000000000), (unsigned long long)-ENOENT);
  CHECK_EQ(alloc_map_vmm_release(m, 0x10), (unsigned long long)-ENOENT);
  alloc_map_get_stats(m, &st);
  CHECK_EQ(st.live, 0);
  CHECK_EQ(st.unknown_frees, 1);
  CHECK_EQ(st.dev[1].allocs, 3);
  CHECK_EQ(st.dev[1].frees, 3);
  CHECK_EQ(st.dev[1].peak_in_use, 6 << 20);
  alloc_map_free(m);
}

/* cuMemRetainAllocationHandle takes any address inside a mapping, not only its start (CUDA's
 * documentation says so): the reference must count, or the memory is accounted freed by the
 * first of the two releases while the application still holds it. */
static void test_vmm_retain_interior(void)
{
  struct alloc_map *m = alloc_map_new(0);
  struct alloc_info in = info(4 << 20, 0, ALLOC_KIND_VMM);
  struct alloc_map_stats st;

  CHECK_EQ(alloc_map_insert(m, ALLOC_SPACE_VMM_HANDLE, 0x20, &in), 0);
  CHECK_EQ(alloc_map_vmm_map(m, 0x7f4000000000, 2 << 20, 0x20), 0);
  CHECK_EQ(alloc_map_vmm_map(m, 0x7f4000200000, 2 << 20, 0x20), 0);
  /* Inside the second mapping; and one byte past both is not mapped. */
  CHECK_EQ(alloc_map_vmm_retain(m, 0x7f4000300000), 0);
  CHECK_EQ(alloc_map_vmm_retain(m, 0x7f4000400000), (unsigned long long)-ENOENT);
  CHECK_EQ(alloc_map_vmm_unmap(m, 0x7f4000000000, 4 << 20), 2);
  CHECK_EQ(alloc_map_vmm_release(m, 0x20), 0);
  CHECK_EQ(in_use(m, 0), 4 << 20); /* the retained reference still holds it */
  CHECK_EQ(alloc_map_vmm_release(m, 0x20), 0);
  CHECK_EQ(in_use(m, 0), 0);
  alloc_map_get_stats(m, &st);
  CHECK_EQ(st.live, 0);
  CHECK_EQ(st.unknown_frees, 0);

  /* Released first (kept by its mapping), then retained through an inside address. */
  CHECK_EQ(alloc_map_insert(m, ALLOC_SPACE_VMM_HANDLE, 0x20, &in), 0);
  CHECK_EQ(alloc_map_vmm_map(m, 0x7f5000000000, 4 << 20, 0x20), 0);
  CHECK_EQ(alloc_map_vmm_release(m, 0x20), 0);
  CHECK_EQ(alloc_map_vmm_retain(m, 0x7f5000001000), 0);
  CHECK_EQ(alloc_map_vmm_unmap(m, 0x7f5000000000, 4 << 20), 1);
  CHECK_EQ(in_use(m, 0), 4 << 20);
  CHECK_EQ(alloc_map_vmm_release(m, 0x20), 0);
  CHECK_EQ(in_use(m, 0), 0);
  alloc_map_get_stats(m, &st);
  CHECK_EQ(st.live, 0);
  CHECK_EQ(st.unknown_frees, 0);
  alloc_map_free(m);
}

/* Many handles, each mapped and released (orphans keyed by serial), across several doublings of
 * the table: each is still found by its mappings and freed by its unmap. */
static void test_vmm_grow(void)
{
  struct alloc_map *m = alloc_map_new(0);
  struct alloc_info in = info(1 << 20, 0, ALLOC_KIND_VMM);
  struct alloc_map_stats st;
  const uint64_t n = 5000;

  for (uint64_t i = 0; i < n; i++) {
    CHECK_EQ(alloc_map_insert(m, ALLOC_SPACE_VMM_HANDLE, 0x1000 + i, &in), 0);
    CHECK_EQ(alloc_map_vmm_map(m, 0x7e0000000000 + (i << 20), 1 << 20, 0x1000 + i), 0);
    if (i % 2)
      CHECK_EQ(alloc_map_vmm_release(m, 0x1000 + i), 0);
  }
  CHECK_EQ(in_use(m, 0), n << 20);
  alloc_map_get_stats(m, &st);
  CHECK_EQ(st.live, n);
  /* One unmap over all of them: contiguous mappings. */
  CHECK_EQ(alloc_map_vmm_unmap(m, 0x7e0000000000, n << 20), (unsigned long long)n);
  CHECK_EQ(in_use(m, 0), (n / 2) << 20); /* the released half is gone */
  for (uint64_t i = 0; i < n; i += 2)
    CHECK_EQ(alloc_map_vmm_release(m, 0x1000 + i), 0);
  CHECK_EQ(in_use(m, 0), 0);
  alloc_map_get_stats(m, &st);
  CHECK_EQ(st.live, 0);
  CHECK_EQ(st.unknown_frees, 0);
  alloc_map_free(m);
}

/* A reservation of many mappings with gaps between them, unmapped as a whole (more mappings
 * than one scan of the table collects): every one inside goes, the one at its end stays. */
static void test_vmm_gaps(void)
{
  struct alloc_map *m = alloc_map_new(0);
  struct alloc_info in = info(1 << 20, 0, ALLOC_KIND_VMM);
  struct alloc_map_stats st;
  const uint64_t n = 3000, base = 0x7d0000000000;

  for (uint64_t i = 0; i <= n; i++) {
    CHECK_EQ(alloc_map_insert(m, ALLOC_SPACE_VMM_HANDLE, 0x1000 + i, &in), 0);
    CHECK_EQ(alloc_map_vmm_map(m, base + (1 << 20) + (i << 21), 1 << 20, 0x1000 + i), 0);
    CHECK_EQ(alloc_map_vmm_release(m, 0x1000 + i), 0);
  }
  CHECK_EQ(in_use(m, 0), (n + 1) << 20);
  /* Starts in a gap; the last mapping starts exactly at the range's end. */
  CHECK_EQ(alloc_map_vmm_unmap(m, base, (n << 21) + (1 << 20)), (unsigned long long)n);
  CHECK_EQ(in_use(m, 0), 1 << 20);
  CHECK_EQ(alloc_map_vmm_unmap(m, base + (1 << 20) + (n << 21), 1 << 20), 1);
  CHECK_EQ(in_use(m, 0), 0);
  /* A range reaching the top of the address space, nothing left in it. */
  CHECK_EQ(alloc_map_vmm_unmap(m, base, UINT64_MAX - base), 0);
  alloc_map_get_stats(m, &st);
  CHECK_EQ(st.live, 0);
  CHECK_EQ(st.unknown_frees, 0);
  alloc_map_free(m);
}

int main(void)
{
  RUN(test_accounting);
  RUN(test_vmm_gaps);
  RUN(test_vmm_lifetimes);
  RUN(test_vmm_retain_interior);
  RUN(test_vmm_grow);
  RUN(test_window_groups);
  RUN(test_many);
  RUN(test_limit);
  RUN(test_threads);
  UNIT_EXIT();
}
