/* CPython frames of the calling thread, merged into its native stack (3.9 to 3.13). */
#define LOG_MODULE "stacks"
#include "agent/pystack.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/stack.h"
#include "agent/util/hash.h"
#include "agent/util/log.h"

#define MAX_PY_FRAMES 128
#define CHUNK_SHIFT 10
#define CHUNK (1u << CHUNK_SHIFT)
#define MAX_CHUNKS 4096 /* 4M distinct (code, line) pairs and code objects */

typedef void PyObject; /* opaque: no struct layout of CPython is used */

static struct {
  int state; /* 0: not looked up, 1: usable, -1: absent or unsupported */
  int minor;
  int (*IsInitialized)(void);
  PyObject *(*TstateGet)(void);    /* the thread state holding the GIL (3.12+: this thread's) */
  PyObject *(*GILStateThis)(void); /* this thread's own thread state */
  PyObject *(*EvalGetFrame)(void);
  PyObject *(*FrameGetBack)(PyObject *);
  PyObject *(*FrameGetCode)(PyObject *);
  int (*FrameGetLineNumber)(PyObject *);
  int (*FrameGetLasti)(PyObject *); /* 3.11+; NULL before */
  void (*IncRef)(PyObject *);
  void (*DecRef)(PyObject *);
  PyObject *(*GetAttrString)(PyObject *, const char *);
  const char *(*UnicodeAsUTF8)(PyObject *);
  void (*ErrFetch)(PyObject **, PyObject **, PyObject **);
  void (*ErrRestore)(PyObject *, PyObject *, PyObject *);
  int (*GCDisable)(void); /* 3.10+; required from 3.11 (see capture_python) */
  int (*GCEnable)(void);
  uintptr_t interp_lo[4], interp_hi[4]; /* executable segments of the interpreter's module */
  int n_interp;
  uintptr_t eval_lo, eval_hi; /* _PyEval_EvalFrameDefault */
} py;

/*
 * Entries live in fixed chunks reached through a directory that never moves, and their count
 * is published with a release store: the exit path resolves without the GIL while a Python
 * thread may still be appending. The hash indexes are touched only by writers (GIL held).
 */
struct code_entry {
  PyObject *code; /* one reference held */
  char *function;
  char *file;
};

struct frame_entry {
  uint32_t code; /* index into codes */
  int32_t line;
};

static struct code_entry *code_chunks[MAX_CHUNKS];
static struct frame_entry *frame_chunks[MAX_CHUNKS];
static _Atomic uint32_t n_codes, n_frames;

struct index {
  uint64_t *keys;
  uint32_t *vals;
  size_t cap, used;
};

static struct index code_index, frame_index;

#define SYM(field, name)                                                                           \
  do {                                                                                             \
    *(void **)&py.field = dlsym(RTLD_DEFAULT, name);                                               \
    if (!py.field)                                                                                 \
      goto absent;                                                                                 \
  } while (0)

static int on_module(struct dl_phdr_info *info, size_t size, void *data)
{
  uintptr_t addr = (uintptr_t)data;
  int match = 0;

  (void)size;
  for (int i = 0; i < info->dlpi_phnum && !match; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
    match = ph->p_type == PT_LOAD && addr >= lo && addr < lo + ph->p_memsz;
  }
  if (!match)
    return 0;
  for (int i = 0; i < info->dlpi_phnum && py.n_interp < 4; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
      py.interp_lo[py.n_interp] = info->dlpi_addr + ph->p_vaddr;
      py.interp_hi[py.n_interp++] = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
    }
  }
  return 1;
}

int pystack_init(void)
{
  const char *(*get_version)(void);
  void *eval;
  Dl_info info;
  const ElfW(Sym) *sym = NULL;
  int major = 0, minor = 0;

  if (py.state)
    return py.state > 0;
  *(void **)&get_version = dlsym(RTLD_DEFAULT, "Py_GetVersion");
  if (!get_version || sscanf(get_version(), "%d.%d", &major, &minor) != 2)
    goto absent;
  if (major != 3 || minor < 9 || minor > 13) {
    log_info("Python %d.%d is not supported for Python stacks (3.9 to 3.13); native stacks only",
             major, minor);
    goto absent;
  }
  /* Without a GIL nothing serializes the writers of this module's tables, and frames may be
   * read by several threads at once: such a build gets native stacks. */
  if (strstr(get_version(), "free-threading") ||
      (minor == 13 && dlsym(RTLD_DEFAULT, "_Py_DecRefShared"))) {
    log_info("Python %d.%d free-threaded builds are not supported for Python stacks; native "
             "stacks only",
             major, minor);
    goto absent;
  }
  py.minor = minor;
  SYM(IsInitialized, "Py_IsInitialized");
  /* 3.13 made the getter public; the old name is a macro there. */
  *(void **)&py.TstateGet = dlsym(RTLD_DEFAULT, "PyThreadState_GetUnchecked");
  if (!py.TstateGet)
    SYM(TstateGet, "_PyThreadState_UncheckedGet");
  SYM(GILStateThis, "PyGILState_GetThisThreadState");
  SYM(EvalGetFrame, "PyEval_GetFrame");
  SYM(FrameGetBack, "PyFrame_GetBack");
  SYM(FrameGetCode, "PyFrame_GetCode");
  SYM(FrameGetLineNumber, "PyFrame_GetLineNumber");
  /* Optional: with it a frame is keyed by its instruction offset, and the line (which 3.10+
   * computes by decoding the code object's line table) is asked for only once per offset. */
  *(void **)&py.FrameGetLasti = dlsym(RTLD_DEFAULT, "PyFrame_GetLasti");
  SYM(IncRef, "Py_IncRef");
  SYM(DecRef, "Py_DecRef");
  SYM(GetAttrString, "PyObject_GetAttrString");
  SYM(UnicodeAsUTF8, "PyUnicode_AsUTF8");
  SYM(ErrFetch, "PyErr_Fetch");
  SYM(ErrRestore, "PyErr_Restore");
  if (minor >= 11) {
    SYM(GCDisable, "PyGC_Disable");
    SYM(GCEnable, "PyGC_Enable");
  }
  dl_iterate_phdr(on_module, (void *)(uintptr_t)py.IsInitialized);
  /* The evaluation loop's extent: its native frames are where Python frames go. */
  eval = dlsym(RTLD_DEFAULT, "_PyEval_EvalFrameDefault");
  if (eval && dladdr1(eval, &info, (void **)&sym, RTLD_DL_SYMENT) && sym && sym->st_size) {
    py.eval_lo = (uintptr_t)eval;
    py.eval_hi = (uintptr_t)eval + sym->st_size;
  }
  py.state = 1;
  log_debug("Python %d.%d found: Python frames are merged into stacks of threads holding the GIL",
            major, minor);
  return 1;
absent:
  py.state = -1;
  return 0;
}

/* ---- tables (writers hold the GIL) ---- */

static int index_find(struct index *ix, uint64_t key, uint32_t *val)
{
  if (!ix->cap)
    return 0;
  for (size_t i = hash_u64(key) & (ix->cap - 1);; i = (i + 1) & (ix->cap - 1)) {
    if (!ix->vals[i])
      return 0;
    if (ix->keys[i] == key) {
      *val = ix->vals[i];
      return 1;
    }
  }
}

/* val must be non-zero. */
static int index_put(struct index *ix, uint64_t key, uint32_t val)
{
  size_t i;

  if ((ix->used + 1) * 2 > ix->cap) {
    size_t cap = ix->cap ? ix->cap * 2 : 1024;
    uint64_t *keys = calloc(cap, sizeof(*keys));
    uint32_t *vals = calloc(cap, sizeof(*vals));
    if (!keys || !vals) {
      free(keys);
      free(vals);
      return -ENOMEM;
    }
    for (size_t j = 0; j < ix->cap; j++) {
      if (!ix->vals[j])
        continue;
      for (i = hash_u64(ix->keys[j]) & (cap - 1); vals[i]; i = (i + 1) & (cap - 1))
        ;
      keys[i] = ix->keys[j];
      vals[i] = ix->vals[j];
    }
    free(ix->keys);
    free(ix->vals);
    ix->keys = keys;
    ix->vals = vals;
    ix->cap = cap;
  }
  for (i = hash_u64(key) & (ix->cap - 1); ix->vals[i]; i = (i + 1) & (ix->cap - 1))
    ;
  ix->keys[i] = key;
  ix->vals[i] = val;
  ix->used++;
  return 0;
}

static char *attr_string(PyObject *obj, const char *name)
{
  PyObject *v = py.GetAttrString(obj, name);
  const char *s;
  char *copy = NULL;

  if (!v)
    return NULL;
  s = py.UnicodeAsUTF8(v);
  if (s)
    copy = strdup(s);
  py.DecRef(v);
  return copy;
}

/* Index + 1 of the code object's entry, or 0. */
static uint32_t code_intern(PyObject *code)
{
  uint32_t id, n = atomic_load_explicit(&n_codes, memory_order_relaxed);
  struct code_entry *e;
  PyObject *et, *ev, *etb;

  if (index_find(&code_index, (uint64_t)(uintptr_t)code, &id))
    return id;
  if (n >= (uint32_t)MAX_CHUNKS * CHUNK)
    return 0;
  if (!code_chunks[n >> CHUNK_SHIFT] &&
      !(code_chunks[n >> CHUNK_SHIFT] = calloc(CHUNK, sizeof(struct code_entry))))
    return 0;
  e = &code_chunks[n >> CHUNK_SHIFT][n & (CHUNK - 1)];
  /* Attribute lookups must not disturb an exception the caller has pending. */
  py.ErrFetch(&et, &ev, &etb);
  e->function = attr_string(code, py.minor >= 11 ? "co_qualname" : "co_name");
  e->file = attr_string(code, "co_filename");
  py.ErrRestore(et, ev, etb);
  if (index_put(&code_index, (uint64_t)(uintptr_t)code, n + 1)) {
    free(e->function);
    free(e->file);
    e->function = e->file = NULL;
    return 0;
  }
  py.IncRef(code);
  e->code = code;
  atomic_store_explicit(&n_codes, n + 1, memory_order_release);
  return n + 1;
}

/* Index + 1 of (code, position), or 0. The position is the instruction offset where
 * PyFrame_GetLasti exists, else the line; the line is read only for a new entry. */
static uint32_t frame_intern(uint32_t code, PyObject *f)
{
  int lasti = py.FrameGetLasti ? py.FrameGetLasti(f) : -1;
  int line = lasti < 0 ? py.FrameGetLineNumber(f) : 0;
  uint64_t key = (uint64_t)code << 32 | (lasti >= 0 ? (uint32_t)lasti : (uint32_t)line);
  uint32_t id, n = atomic_load_explicit(&n_frames, memory_order_relaxed);
  struct frame_entry *e;

  if (index_find(&frame_index, key, &id))
    return id;
  if (lasti >= 0)
    line = py.FrameGetLineNumber(f);
  if (n >= (uint32_t)MAX_CHUNKS * CHUNK)
    return 0;
  if (!frame_chunks[n >> CHUNK_SHIFT] &&
      !(frame_chunks[n >> CHUNK_SHIFT] = calloc(CHUNK, sizeof(struct frame_entry))))
    return 0;
  e = &frame_chunks[n >> CHUNK_SHIFT][n & (CHUNK - 1)];
  e->code = code;
  e->line = line;
  if (index_put(&frame_index, key, n + 1))
    return 0;
  atomic_store_explicit(&n_frames, n + 1, memory_order_release);
  return n + 1;
}

/*
 * The thread's Python frames, leaf first, as tagged frame ids. GIL held.
 *
 * From 3.11 a frame object exists only once something asks for it: PyEval_GetFrame and
 * PyFrame_GetBack create one for each frame not asked for before, and every such allocation of
 * a GC-tracked object may start a garbage collection, which runs finalizers (__del__) and
 * gc.callbacks: arbitrary Python code inside a driver call (3.11 collects right there; 3.12+
 * schedules it for after the call). The collector is off for the walk and restored as it was.
 */
static int capture_python(uint64_t *out, int max)
{
  int gc_was_on = py.GCDisable ? py.GCDisable() : 0;
  PyObject *f = py.EvalGetFrame(); /* borrowed */
  int n = 0;

  if (!f)
    goto out;
  py.IncRef(f);
  while (f && n < max) {
    PyObject *code = py.FrameGetCode(f); /* new reference */
    uint32_t c = code ? code_intern(code) : 0, id = c ? frame_intern(c - 1, f) : 0;
    PyObject *back;

    if (code)
      py.DecRef(code);
    if (id)
      out[n++] = STACK_FRAME_PYTHON | id;
    back = py.FrameGetBack(f); /* new reference or NULL */
    py.DecRef(f);
    f = back;
  }
  if (f)
    py.DecRef(f);
out:
  if (gc_was_on)
    py.GCEnable();
  return n;
}

/*
 * Not PyGILState_Check: CPython turns that check off for good once a subinterpreter was created,
 * and it then answers 1 on every thread, also on one that released the GIL, whose
 * PyEval_GetFrame reads a NULL thread state (a crash) or the frames of the thread that holds
 * the GIL (3.9 to 3.11, where the current thread state is the process's). A thread holds the
 * GIL when the thread state holding it is its own; a thread running a subinterpreter's thread
 * state is not its own (GILState) one: it gets native stacks, safely.
 */
static int holds_gil(void)
{
  PyObject *ts = py.TstateGet();

  return ts && ts == py.GILStateThis();
}

static int in_interpreter(uint64_t ip)
{
  for (int i = 0; i < py.n_interp; i++)
    if (ip >= py.interp_lo[i] && ip < py.interp_hi[i])
      return 1;
  return 0;
}

static int is_eval(uint64_t ip)
{
  return ip > py.eval_lo && ip <= py.eval_hi; /* return addresses: after the call */
}

int pystack_merge(uint64_t *frames, int n, int max)
{
  uint64_t pyf[MAX_PY_FRAMES], out[STACK_MAX_DEPTH];
  int np, k = 0, hosts = 0, placed = 0, m = 0, first_interp = -1;

  if (py.state <= 0 || !py.IsInitialized() || !holds_gil())
    return n;
  np = capture_python(pyf, MAX_PY_FRAMES);
  if (!np)
    return n;
  if (max > STACK_MAX_DEPTH)
    max = STACK_MAX_DEPTH;
  for (int i = 0; i < n; i++) {
    if (!in_interpreter(frames[i]))
      continue;
    if (first_interp < 0)
      first_interp = i;
    hosts += is_eval(frames[i]);
  }
  /*
   * Each native evaluation-loop frame runs one or more Python frames (3.11+ runs Python-to-
   * Python calls inside one loop). Without reading interpreter structs we cannot tell which,
   * so every loop frame gets one Python frame from the root side and the leaf-most gets the
   * rest. Only native frames of other modules between two loop frames (an extension calling
   * back into Python) can end up on the wrong side of a Python frame; the interpreter's own
   * frames are dropped.
   */
  for (int i = 0; i < n && m < max; i++) {
    int host;

    if (!in_interpreter(frames[i])) {
      out[m++] = frames[i];
      continue;
    }
    host = hosts ? is_eval(frames[i]) : i == first_interp;
    if (host) {
      int left = hosts ? hosts - k : 1;
      int quota = np - placed - (left - 1);
      if (quota < 1)
        quota = np - placed > 0 ? 1 : 0;
      for (int j = 0; j < quota && m < max; j++)
        out[m++] = pyf[placed++];
      k++;
    }
  }
  if (first_interp < 0) /* no interpreter frame unwound (unwinding stopped early) */
    while (placed < np && m < max)
      out[m++] = pyf[placed++];
  memcpy(frames, out, (size_t)m * sizeof(*out));
  return m;
}

int pystack_resolve(uint64_t frame, const char **function, const char **file, int *line)
{
  uint32_t id = (uint32_t)(frame & ~STACK_FRAME_PYTHON), idx, c;
  const struct frame_entry *fe;
  const struct code_entry *ce;

  *function = NULL;
  *file = NULL;
  *line = 0;
  if (!(frame & STACK_FRAME_PYTHON) || id == 0 ||
      id > atomic_load_explicit(&n_frames, memory_order_acquire))
    return -ENOENT;
  idx = id - 1;
  fe = &frame_chunks[idx >> CHUNK_SHIFT][idx & (CHUNK - 1)];
  c = fe->code;
  if (c >= atomic_load_explicit(&n_codes, memory_order_acquire))
    return -ENOENT;
  ce = &code_chunks[c >> CHUNK_SHIFT][c & (CHUNK - 1)];
  *function = ce->function ? ce->function : "?";
  *file = ce->file;
  *line = fe->line;
  return 0;
}
