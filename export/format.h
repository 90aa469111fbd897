/* Human-readable numbers for the agent's log lines and summary and the CLI's output. */
#ifndef GPUPROF_EXPORT_FORMAT_H
#define GPUPROF_EXPORT_FORMAT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* "512 B", "1.5 KiB", "16.0 GiB": binary units, one decimal. */
static inline void format_bytes(uint64_t b, char *buf, size_t len)
{
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)b;
  int u = 0;

  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    u++;
  }
  if (u == 0)
    snprintf(buf, len, "%llu B", (unsigned long long)b);
  else
    snprintf(buf, len, "%.1f %s", v, units[u]);
}

#endif
