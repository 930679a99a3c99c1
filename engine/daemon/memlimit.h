/* Memory cgroup limits of the coordinator (memlimit.c). */
#ifndef DLSHIM_MEMLIMIT_H
#define DLSHIM_MEMLIMIT_H

#include <stdint.h>

/* The lowest memory limit (cgroup v1 memory.limit_in_bytes or v2
 * memory.max) on this process's cgroups and their ancestors, in bytes;
 * 0 when there is none or it cannot be read. */
uint64_t memlimit_cgroup_bytes(void);

/* The cache size to use for a wanted size under `limit` (0 = none):
 * `want`, or less so that the coordinator stays well below the limit. */
uint64_t memlimit_cap(uint64_t want, uint64_t limit);

#endif
