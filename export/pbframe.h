/* Framing of protobuf-c output: the key and length around bytes protobuf-c packed. */
#ifndef GPUPROF_EXPORT_PBFRAME_H
#define GPUPROF_EXPORT_PBFRAME_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* A varint at p (at most 10 bytes); returns its length. Used only for keys and lengths: every
 * field's contents are packed by protobuf-c. */
static inline size_t pb_put_varint(uint8_t *p, uint64_t v)
{
  size_t n = 0;

  while (v >= 0x80) {
    p[n++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  p[n++] = (uint8_t)v;
  return n;
}

/* The varint at p[*at] (before end) into *v, *at moved past it: 0, or -1 when it is cut or
 * longer than 10 bytes. For readers of packed bytes (gpuprof merge, tests). */
static inline int pb_get_varint(const uint8_t *p, size_t end, size_t *at, uint64_t *v)
{
  *v = 0;
  for (unsigned s = 0; s < 70; s += 7) {
    if (*at >= end)
      return -1;
    *v |= (uint64_t)(p[*at] & 0x7f) << s;
    if (!(p[(*at)++] & 0x80))
      return 0;
  }
  return -1;
}

/*
 * Frames n bytes that were packed at p + 2 as one length-delimited field (tag: its key byte) at
 * p; returns the bytes of the field. protobuf-c's pack returns the size it wrote, so a message
 * is packed first, after room for a one-byte length (hot messages are nearly always below 128
 * bytes), and moved up when its length needs more: sizing it beforehand would walk the message
 * once more.
 */
static inline size_t pb_frame_field(uint8_t *p, uint8_t tag, size_t n)
{
  uint8_t len[10];
  size_t h;

  p[0] = tag;
  if (n < 0x80) {
    p[1] = (uint8_t)n;
    return 2 + n;
  }
  h = pb_put_varint(len, n);
  memmove(p + 1 + h, p + 2, n);
  memcpy(p + 1, len, h);
  return 1 + h + n;
}

#endif
