/* UTF-8 validity checks shared by the JSON, pprof and Pyroscope encoders. */
#include "export/utf8.h"

size_t utf8_seq_len(const unsigned char *s, size_t n)
{
  unsigned char lo = 0x80, hi = 0xbf; /* the range of the second byte */
  size_t len;

  if (s[0] < 0x80)
    return 1;
  if (s[0] >= 0xc2 && s[0] <= 0xdf) {
    len = 2;
  } else if (s[0] >= 0xe0 && s[0] <= 0xef) {
    len = 3;
    if (s[0] == 0xe0)
      lo = 0xa0; /* overlong */
    else if (s[0] == 0xed)
      hi = 0x9f; /* surrogates */
  } else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
    len = 4;
    if (s[0] == 0xf0)
      lo = 0x90; /* overlong */
    else if (s[0] == 0xf4)
      hi = 0x8f; /* above U+10FFFF */
  } else {
    return 0;
  }
  if (n < 2 || s[1] < lo || s[1] > hi)
    return 0;
  for (size_t i = 2; i < len; i++)
    if (i >= n || (s[i] & 0xc0) != 0x80)
      return 0;
  return len;
}

size_t utf8_valid_prefix(const char *s, size_t len)
{
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0, n;

  while (i < len) {
    if (p[i] < 0x80) {
      i++;
      continue;
    }
    n = utf8_seq_len(p + i, len - i);
    if (!n)
      break;
    i += n;
  }
  return i;
}

size_t utf8_fix(char *s)
{
  unsigned char *p = (unsigned char *)s;
  size_t left = 0, fixed = 0;

  while (p[left])
    left++;
  left++; /* the NUL: a sequence cut by it is invalid */
  while (*p) {
    size_t n = utf8_seq_len(p, left);
    if (!n) {
      *p = '?';
      n = 1;
      fixed++;
    }
    p += n;
    left -= n;
  }
  return fixed;
}
