/* Reads the GPU code images nvcc produces (fatbin wrapper, fatbin, cubin ELF, PTX text). */
#ifndef FAKEGPU_IMAGE_H
#define FAKEGPU_IMAGE_H

#include <stddef.h>

struct fg_image_function {
  const char *name; /* mangled entry name, valid during the callback only */
  int num_regs;     /* registers per thread, 0 if the image does not say */
  int static_smem;  /* static shared memory bytes, 0 if unknown */
  int max_threads;  /* max threads per block, 0 if unknown */
};

/* Called once per kernel entry; return non-zero to stop early. */
typedef int (*fg_image_fn)(const struct fg_image_function *fn, void *arg);

/* Detects the format of `image` (as passed to cuModuleLoadData / cuLibraryLoadData /
 * __cudaRegisterFatBinary: a __fatBinC_Wrapper_t, a fatbin, a cubin or NUL-terminated PTX)
 * and calls `fn` for each kernel entry it defines (duplicates across the architectures of a
 * fatbin reported once, cubins before PTX so that register counts are known). Returns the
 * number of entries, or -EINVAL for an image it cannot read, -ENOTSUP when a fatbin's only
 * entries are compressed in a way it cannot undo (LZ4 and zstd are undone with liblz4.so.1 /
 * libzstd.so.1, loaded on first need; a fatbin with one readable entry skips the others).
 * Thread-safe; `fn` may be NULL to count. Whoever links this file needs libelf. */
int fg_image_functions(const void *image, fg_image_fn fn, void *arg);

#endif
