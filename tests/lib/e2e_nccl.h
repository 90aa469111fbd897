/* Checked NCCL calls for the end-to-end test programs that use NCCL's API (the NCCL double). */
#ifndef GPUPROF_TESTS_LIB_E2E_NCCL_H
#define GPUPROF_TESTS_LIB_E2E_NCCL_H

#include <stdio.h>
#include <stdlib.h>

#include <nccl.h>

/* A failed NCCL call prints its error on stderr and exits with status 1, as CU does. */
#define NC(call)                                                                                   \
  do {                                                                                             \
    ncclResult_t r_ = (call);                                                                      \
    if (r_ != ncclSuccess) {                                                                       \
      fprintf(stderr, "%s: %s\n", #call, ncclGetErrorString(r_));                                  \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

#endif
