/* Unit tests of the correlation table (agent/corr.c), including a concurrent hammer. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>

#include "agent/corr.h"
#include "agent/util/hash.h"
#include "unit.h"

static const char *const api_names[] = {"cudaLaunchKernel_v7000", "cuLaunchKernel",
                                        "cudaMalloc_v3020"};

static void fill(struct corr_info *info, uint32_t id)
{
  memset(info, 0, sizeof(*info));
  info->corr_id = id;
  info->parent_corr_id = id / 2;
  info->tid = id * 3 + 1;
  info->cbid = (uint16_t)(id % 800);
  info->domain = id & 1 ? CORR_DOMAIN_DRIVER : CORR_DOMAIN_RUNTIME;
  info->api_name = api_names[id % 3];
  info->enter_ns = (uint64_t)id * 1000 + 7;
}

/* Every field of a looked-up entry derives from its id: a torn read would show. */
static int consistent(const struct corr_info *got, uint32_t id)
{
  struct corr_info want;

  fill(&want, id);
  return got->corr_id == id && got->parent_corr_id == want.parent_corr_id && got->tid == want.tid &&
         got->cbid == want.cbid && got->domain == want.domain && got->api_name == want.api_name &&
         got->enter_ns == want.enter_ns && (got->exit_ns == 0 || got->exit_ns == want.enter_ns + 5);
}

static void test_basic(void)
{
  struct corr_table *t = corr_table_new(10);
  struct corr_info in, out;

  CHECK(t != NULL);
  CHECK_EQ(corr_table_size(t), 1024); /* at least 1024, power of two */
  fill(&in, 42);
  corr_table_enter(t, &in);
  CHECK_EQ(corr_table_lookup(t, 42, &out), 0);
  CHECK(consistent(&out, 42));
  CHECK_EQ(out.exit_ns, 0);
  corr_table_exit(t, 42, in.enter_ns + 5);
  CHECK_EQ(corr_table_lookup(t, 42, &out), 0);
  CHECK_EQ(out.exit_ns, in.enter_ns + 5);
  CHECK_STR(out.api_name, "cudaLaunchKernel_v7000");

  /* Never seen, id 0 (CUPTI's "unknown"), and a neighbouring slot. */
  CHECK_EQ(corr_table_lookup(t, 43, &out), (unsigned long long)-ENOENT);
  CHECK_EQ(corr_table_lookup(t, 0, &out), (unsigned long long)-ENOENT);

  /* 42 + 1024 lands in the same slot: the old call is gone, not misattributed. */
  fill(&in, 42 + 1024);
  corr_table_enter(t, &in);
  CHECK_EQ(corr_table_lookup(t, 42, &out), (unsigned long long)-ENOENT);
  CHECK_EQ(corr_table_lookup(t, 42 + 1024, &out), 0);
  CHECK(consistent(&out, 42 + 1024));
  /* An EXIT for the overwritten id leaves the new entry alone. */
  corr_table_exit(t, 42, 99);
  CHECK_EQ(corr_table_lookup(t, 42 + 1024, &out), 0);
  CHECK_EQ(out.exit_ns, 0);
  CHECK_EQ(corr_table_collisions(t), 0);
  corr_table_free(t);
  corr_table_free(NULL);
}

/* The exit word: ns up to 2^40 ns after ENTER, µs beyond; a clock stepped back gives 0. */
static void test_exit_times(void)
{
  struct corr_table *t = corr_table_new(1024);
  struct corr_info in, out;
  uint64_t long_call = (1ull << 40) + 123456789;

  fill(&in, 7);
  corr_table_enter(t, &in);
  corr_table_exit(t, 7, in.enter_ns + (1ull << 40) - 1);
  CHECK_EQ(corr_table_lookup(t, 7, &out), 0);
  CHECK_EQ(out.exit_ns, in.enter_ns + (1ull << 40) - 1);

  fill(&in, 8);
  corr_table_enter(t, &in);
  corr_table_exit(t, 8, in.enter_ns + long_call);
  CHECK_EQ(corr_table_lookup(t, 8, &out), 0);
  CHECK_EQ(out.exit_ns, in.enter_ns + long_call / 1000 * 1000);

  fill(&in, 9);
  corr_table_enter(t, &in);
  corr_table_exit(t, 9, in.enter_ns - 50);
  CHECK_EQ(corr_table_lookup(t, 9, &out), 0);
  CHECK_EQ(out.exit_ns, in.enter_ns);

  /* The highest ids: the tag still tells the slot's calls apart. */
  fill(&in, 0xfffffc00u + 9);
  corr_table_enter(t, &in);
  corr_table_exit(t, 0xfffffc00u + 9, in.enter_ns + 5);
  CHECK_EQ(corr_table_lookup(t, 0xfffffc00u + 9, &out), 0);
  CHECK_EQ(out.exit_ns, in.enter_ns + 5);
  corr_table_free(t);
}

#define WRITERS 4
#define PER_WRITER 200000
/* Full lookup passes (a whole window of written ids) the reader makes while the writers still
 * write. Without it, a reader thread descheduled right after pthread_create (a loaded machine)
 * found all writers done and looked nothing up: "0 lookups, 0 found", CHECK(found > 0) failed.
 * A pass counts only once WINDOW ids have been handed out: passes made before the writers got
 * going look nothing up. */
#define MIN_READER_PASSES 100
#define WINDOW 2000

static struct corr_table *shared;
static atomic_int writers_done;
static atomic_int reader_passes;
static atomic_uint next_id = 1;

static void *writer(void *arg)
{
  struct corr_info in;

  (void)arg;
  /* At least PER_WRITER calls each, and on until the reader has overlapped with us. */
  for (int i = 0; i < PER_WRITER || atomic_load(&reader_passes) < MIN_READER_PASSES; i++) {
    uint32_t id = atomic_fetch_add(&next_id, 1);
    fill(&in, id);
    corr_table_enter(shared, &in);
    corr_table_exit(shared, id, in.enter_ns + 5);
  }
  atomic_fetch_add(&writers_done, 1);
  return NULL;
}

/* Table sizes round up to a power of two; one past the largest does not loop forever. */
static void test_round_pow2(void)
{
  CHECK_EQ(hash_round_pow2(0), 1);
  CHECK_EQ(hash_round_pow2(1000), 1024);
  CHECK_EQ(hash_round_pow2(1024), 1024);
  CHECK_EQ(hash_round_pow2(((size_t)1 << 63) + 1), (size_t)1 << 63);
  CHECK_EQ(hash_round_pow2(SIZE_MAX), (size_t)1 << 63);
}

static void test_concurrent(void)
{
  pthread_t th[WRITERS];
  uint64_t found = 0, lookups = 0, torn = 0;
  struct corr_info out;

  shared = corr_table_new(4096);
  for (int i = 0; i < WRITERS; i++)
    pthread_create(&th[i], NULL, writer, NULL);
  /* The worker's role: look up recent ids while writers wrap the ring many times. */
  while (atomic_load(&writers_done) < WRITERS) {
    uint32_t hi = atomic_load(&next_id);
    for (uint32_t id = hi > WINDOW ? hi - WINDOW : 1; id < hi; id += 7) {
      lookups++;
      if (corr_table_lookup(shared, id, &out) == 0) {
        found++;
        if (!consistent(&out, id))
          torn++;
      }
    }
    if (hi > WINDOW)
      atomic_fetch_add(&reader_passes, 1);
  }
  for (int i = 0; i < WRITERS; i++)
    pthread_join(th[i], NULL);
  CHECK_EQ(torn, 0);
  CHECK(atomic_load(&reader_passes) >= MIN_READER_PASSES);
  CHECK(found > 0);
  fprintf(stderr, "     %d passes, %llu lookups, %llu found, %llu collisions\n",
          atomic_load(&reader_passes), (unsigned long long)lookups, (unsigned long long)found,
          (unsigned long long)corr_table_collisions(shared));
  corr_table_free(shared);
}

int main(void)
{
  RUN(test_basic);
  RUN(test_exit_times);
  RUN(test_round_pow2);
  RUN(test_concurrent);
  UNIT_EXIT();
}
