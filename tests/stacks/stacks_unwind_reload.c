/* The safe unwinder after a library is dlclosed and another build of it, without unwind
 * information, is dlopened at its addresses: a thread that unwound through the first one must
 * treat the new one's frame as a fresh thread does (agent/unwind.c caches, per thread, the code
 * addresses known to have unwind information). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "agent/stack.h"
#include "agent/unwind.h"

static int failures;

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "stacks_unwind_reload: %s:%d: check failed: %s\n", __FILE__, __LINE__,       \
              #cond);                                                                              \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

typedef int (*call_fn)(int (*cb)(void));

static uint64_t frames[STACK_MAX_DEPTH];
static int n_frames;

/* In the program (a skipped module: unwind_init skips the module that holds the unwinder, here
 * the program itself), so the captured stack starts at the library's frame. */
__attribute__((noinline)) static int capture(void)
{
  n_frames = unwind_capture(frames, STACK_MAX_DEPTH);
  return n_frames;
}

static call_fn load(const char *lib, void **handle)
{
  call_fn call;

  *handle = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!*handle) {
    fprintf(stderr, "stacks_unwind_reload: dlopen %s: %s\n", lib, dlerror());
    exit(1);
  }
  call = (call_fn)(uintptr_t)dlsym(*handle, "stk_unwind_reload_call");
  if (!call) {
    fprintf(stderr, "stacks_unwind_reload: no stk_unwind_reload_call in %s\n", lib);
    exit(1);
  }
  return call;
}

/* The library's frame and how the stack went on from it on a thread that never unwound before. */
static void *fresh_thread(void *arg)
{
  call_fn call = (call_fn)(uintptr_t)arg;

  n_frames = 0;
  CHECK(call(capture) == n_frames + 1);
  return NULL;
}

struct result {
  int n;
  uint64_t leaf;
};

static struct result capture_here(call_fn call)
{
  n_frames = 0;
  CHECK(call(capture) == n_frames + 1);
  return (struct result){n_frames, n_frames ? frames[0] : 0};
}

static struct result capture_fresh(call_fn call)
{
  pthread_t th;

  n_frames = 0;
  CHECK(pthread_create(&th, NULL, fresh_thread, (void *)(uintptr_t)call) == 0);
  pthread_join(th, NULL);
  return (struct result){n_frames, n_frames ? frames[0] : 0};
}

/* Same leaf; the stack ends at the library's frame on this thread iff it does on a fresh one
 * (the callers beyond differ: main here, the thread's start there). */
static void check_like_fresh(call_fn call, const char *what)
{
  struct result here = capture_here(call), fresh = capture_fresh(call);

  CHECK(here.n >= 1 && here.leaf > (uintptr_t)call && here.leaf < (uintptr_t)call + 64);
  CHECK(here.leaf == fresh.leaf);
  if ((here.n == 1) != (fresh.n == 1)) {
    fprintf(stderr, "stacks_unwind_reload: %s: %d frames here, %d on a fresh thread\n", what,
            here.n, fresh.n);
    failures++;
  }
}

int main(int argc, char **argv)
{
  call_fn with, without;
  void *h;

  if (argc != 3) {
    fprintf(stderr, "usage: stacks_unwind_reload LIB_WITH_UNWIND_INFO LIB_WITHOUT\n");
    return 2;
  }
  unwind_init(NULL, NULL);
  unwind_set_safe(1);

  /* With unwind information: the library's frame, then main's and the C library's. */
  with = load(argv[1], &h);
  check_like_fresh(with, "with unwind information");
  CHECK(capture_here(with).n >= 3);
  dlclose(h);

  /* The other build where the first one was. */
  without = load(argv[2], &h);
  if (without != with) {
    /* Nothing to show then: the loader put it elsewhere (the test needs the same addresses). */
    fprintf(stderr, "stacks_unwind_reload: the second library was loaded at other addresses; "
                    "skipped\n");
    dlclose(h);
    return 77;
  }
  check_like_fresh(without, "without unwind information, loaded where the first one was");
  dlclose(h);

  /* And the first one again. */
  with = load(argv[1], &h);
  check_like_fresh(with, "with unwind information again");
  CHECK(capture_here(with).n >= 3);
  dlclose(h);
  if (failures)
    return 1;
  printf("stacks_unwind_reload: ok\n");
  return 0;
}
