/* Counter stripes are recycled across thread churn (agent/thread.c): threads created after
 * thousands of others still own a stripe, counts stay exact, a late destructor is safe. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "agent/thread.h"
#include "agent/util/counter.h"
#include "tests/unit/unit.h"

#define WIDE (COUNTER_SHARED_STRIPE - 1) /* every owned stripe but the main thread's */
#define CHURN 2000
#define ADDS 1000

static struct striped_counter counted;
static pthread_barrier_t barrier;
static uint32_t slots[WIDE];
static pthread_key_t late_key;
static _Atomic int late_shared, late_runs;

/* Runs after the agent's stripe destructor (a key created later): a CUDA call made there must
 * count on the shared stripe, never on the stripe the thread gave back. */
static void late_destructor(void *p)
{
  struct thread_state *ts = thread_state_get();

  (void)p;
  atomic_fetch_add(&late_runs, 1);
  if (ts->counter_slot == COUNTER_SHARED_STRIPE)
    atomic_fetch_add(&late_shared, 1);
  striped_counter_add(&counted, ts->counter_slot, ADDS);
}

static void *counter_thread(void *arg)
{
  struct thread_state *ts = thread_state_get();
  intptr_t i = (intptr_t)arg;

  pthread_setspecific(late_key, (void *)1);
  if (i >= 0) {
    slots[i] = ts->counter_slot;
    pthread_barrier_wait(&barrier); /* all alive together */
  } else {
    slots[0] = ts->counter_slot;
  }
  for (int k = 0; k < ADDS; k++)
    striped_counter_add(&counted, ts->counter_slot, 1);
  return NULL;
}

/* WIDE threads alive at once: each owns a stripe of its own. */
static void wide_round(const char *what)
{
  pthread_t th[WIDE];
  int shared = 0, dup = 0;

  pthread_barrier_init(&barrier, NULL, WIDE);
  for (intptr_t i = 0; i < WIDE; i++)
    if (pthread_create(&th[i], NULL, counter_thread, (void *)i) != 0)
      abort();
  for (int i = 0; i < WIDE; i++)
    pthread_join(th[i], NULL);
  pthread_barrier_destroy(&barrier);
  for (int i = 0; i < WIDE; i++) {
    shared += slots[i] >= COUNTER_SHARED_STRIPE;
    for (int j = 0; j < i; j++)
      dup += slots[i] == slots[j];
  }
  printf("%s: %d threads, %d on the shared stripe, %d owned twice\n", what, WIDE, shared, dup);
  CHECK(shared == 0);
  CHECK(dup == 0);
}

int main(void)
{
  uint32_t main_slot = thread_state_get()->counter_slot;
  int shared = 0;

  /* Created after the agent's key (thread_state_get above): its destructor runs later. */
  if (pthread_key_create(&late_key, late_destructor) != 0)
    abort();
  CHECK(main_slot < COUNTER_SHARED_STRIPE);
  wide_round("first round");
  /* One at a time, many more threads than stripes: each gets an owned one back. */
  for (int i = 0; i < CHURN; i++) {
    pthread_t t;

    if (pthread_create(&t, NULL, counter_thread, (void *)(intptr_t)-1) != 0)
      abort();
    pthread_join(t, NULL);
    shared += slots[0] >= COUNTER_SHARED_STRIPE;
  }
  printf("churn: %d threads one at a time, %d on the shared stripe\n", CHURN, shared);
  CHECK(shared == 0);
  wide_round("after churn");
  printf("late destructors: %d, %d on the shared stripe\n", atomic_load(&late_runs),
         atomic_load(&late_shared));
  CHECK(atomic_load(&late_runs) == 2 * WIDE + CHURN);
  CHECK(atomic_load(&late_shared) == atomic_load(&late_runs));
  /* Exact: every add of every thread, its late destructor's included. */
  CHECK(striped_counter_sum(&counted) == (uint64_t)(2 * WIDE + CHURN) * 2 * ADDS);
  printf("sum %llu\n", (unsigned long long)striped_counter_sum(&counted));
  if (unit_failures)
    fprintf(stderr, "%d checks failed\n", unit_failures);
  return unit_failures ? 1 : 0;
}
