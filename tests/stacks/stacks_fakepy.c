/* A program that looks like a CPython interpreter to the agent (it exports the C-API functions
 * the agent looks up, with the version string from STK_FAKEPY_VERSION) and runs one fake Python
 * frame: a free-threaded build must be refused (native stacks), a supported one merged, with the
 * garbage collector off while its frames are walked (asking 3.11+ for a frame object allocates
 * one, which may start a collection that runs Python code inside the driver call). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/stacks/stk.h"

#define STK_API __attribute__((visibility("default"), used))

static int frame_obj, code_obj, name_obj, file_obj, tstate_obj;
static int gc_enabled = 1, frames_with_gc_on;

STK_API const char *Py_GetVersion(void)
{
  const char *v = getenv("STK_FAKEPY_VERSION");

  return v ? v : "3.11.7 (main, fake)";
}

STK_API int Py_IsInitialized(void)
{
  return 1;
}

STK_API int PyGILState_Check(void)
{
  return 1;
}

STK_API void *PyThreadState_GetUnchecked(void)
{
  return &tstate_obj;
}

STK_API void *PyGILState_GetThisThreadState(void)
{
  return &tstate_obj;
}

STK_API int PyGC_Disable(void)
{
  int was = gc_enabled;

  gc_enabled = 0;
  return was;
}

STK_API int PyGC_Enable(void)
{
  int was = gc_enabled;

  gc_enabled = 1;
  return was;
}

STK_API void *PyEval_GetFrame(void)
{
  frames_with_gc_on += gc_enabled;
  return &frame_obj;
}

STK_API void *PyFrame_GetBack(void *f)
{
  (void)f;
  frames_with_gc_on += gc_enabled;
  return NULL;
}

STK_API void *PyFrame_GetCode(void *f)
{
  (void)f;
  return &code_obj;
}

STK_API int PyFrame_GetLineNumber(void *f)
{
  (void)f;
  return 7;
}

STK_API void Py_IncRef(void *o)
{
  (void)o;
}

STK_API void Py_DecRef(void *o)
{
  (void)o;
}

STK_API void *PyObject_GetAttrString(void *o, const char *name)
{
  (void)o;
  return strcmp(name, "co_filename") ? (void *)&name_obj : (void *)&file_obj;
}

STK_API const char *PyUnicode_AsUTF8(void *o)
{
  return o == &file_obj ? "fake.py" : "fake_python_function";
}

STK_API void PyErr_Fetch(void **t, void **v, void **tb)
{
  *t = *v = *tb = NULL;
}

STK_API void PyErr_Restore(void *t, void *v, void *tb)
{
  (void)t;
  (void)v;
  (void)tb;
}

STK_FRAME static void stk_fakepy_launch(CUfunction k)
{
  STK_CU(cuLaunchKernel(k, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
}

int main(void)
{
  stk_context();
  stk_fakepy_launch(stk_kernel("stk_kernel_fakepy"));
  STK_CU(cuCtxSynchronize());
  if (frames_with_gc_on) {
    fprintf(stderr, "stacks_fakepy: %d frame objects asked for with the collector on\n",
            frames_with_gc_on);
    return 1;
  }
  if (!gc_enabled) {
    fprintf(stderr, "stacks_fakepy: the collector was left off\n");
    return 1;
  }
  return 0;
}
