/* CPython frames of the calling thread, merged into its native stack (3.9 to 3.13). */
#ifndef GPUPROF_AGENT_PYSTACK_H
#define GPUPROF_AGENT_PYSTACK_H

#include <stdint.h>

/*
 * Nothing links libpython: pystack_init looks the interpreter up with dlsym(RTLD_DEFAULT)
 * (the python executable, or a libpython loaded globally) and checks its version. Python
 * frames are read only through public C-API functions, and only on a thread that holds the
 * GIL (the thread state holding it is the thread's own, agent/pystack.c: not PyGILState_Check,
 * which a subinterpreter turns off), with the garbage collector paused (3.11+ allocates frame
 * objects on demand, and a collection would run Python code inside the driver call): the GIL
 * then also serializes every writer of this module's
 * tables. Free-threaded builds (no GIL) are reported once and get native stacks only.
 * A thread without the GIL (ctypes.CDLL calls and many extension modules release it around
 * C calls) gets its native stack only.
 *
 * A Python frame is interned as (code object, instruction offset) -> dense index (the line
 * before 3.11, which has no PyFrame_GetLasti), tagged with STACK_FRAME_PYTHON. The code object's
 * co_qualname (co_name before 3.11) and co_filename are copied once per distinct code object, which
 * is kept alive (one reference) so that its address cannot be reused by another code object while
 * it is a key.
 */

/* 1 if a supported interpreter is present. Looked up once, at the agent's init: an interpreter
 * loaded later (a program that dlopens libpython after its first CUDA call) is not seen. */
int pystack_init(void);

/*
 * If the calling thread runs Python and holds the GIL: replaces, in the leaf-first native
 * stack frames[0..n), the interpreter's own frames by the thread's Python frames (at most
 * max frames in all) and returns the new count. Otherwise returns n unchanged. Never blocks.
 */
int pystack_merge(uint64_t *frames, int n, int max);

/* The names of a tagged Python frame. 0, or -ENOENT for an unknown frame. */
int pystack_resolve(uint64_t frame, const char **function, const char **file, int *line);

#endif
