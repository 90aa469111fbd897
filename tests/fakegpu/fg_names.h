/* Name tables generated at configure time from the CUDA 13 headers (fg_names.c in the build). */
#ifndef FAKEGPU_FG_NAMES_H
#define FAKEGPU_FG_NAMES_H

#include <stdint.h>

/* The enumerator name of a CUresult ("CUDA_ERROR_INVALID_VALUE"), NULL if unknown. */
const char *fg_cuda_result_name(int code);

/* The cbid names CUPTI reports (the enumerator without its CUPTI_*_TRACE_CBID_ prefix,
 * "INVALID" for 0), NULL past the table. */
const char *fg_driver_cbid_name(uint32_t cbid);
const char *fg_runtime_cbid_name(uint32_t cbid);

#endif
