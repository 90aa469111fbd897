/* UTF-8 validity for the strings the agent writes: JSON, pprof and Pyroscope labels. */
#ifndef GPUPROF_EXPORT_UTF8_H
#define GPUPROF_EXPORT_UTF8_H

#include <stddef.h>

/*
 * Names, paths and configuration text are bytes, while strict readers (Python's json, jq,
 * protobuf string fields, Pyroscope) refuse a whole document for one invalid sequence. Valid
 * means RFC 3629: no overlong forms, no UTF-16 surrogates (Java's modified UTF-8 thread
 * names), nothing above U+10FFFF.
 */

/* Length (1 to 4) of the valid sequence at s, of which n >= 1 bytes may be read; 0 if s does
 * not start one. Reads no further than the first byte that ends the sequence as invalid, so a
 * NUL-terminated string may pass its strlen + 1 as n. */
size_t utf8_seq_len(const unsigned char *s, size_t n);

/* How many bytes at the start of s[0..len) are valid UTF-8 (len when all are). */
size_t utf8_valid_prefix(const char *s, size_t len);

/* Replaces, in the NUL-terminated s, each byte that is not part of a valid sequence with '?'.
 * Returns how many were replaced. */
size_t utf8_fix(char *s);

#endif
