/* The coordinator's memory cgroup limit. The shared cache is charged to
 * the cgroup of the process that fills it (the coordinator), so a cache
 * larger than the limit gets the coordinator OOM-killed in the middle of
 * a job; it is capped below the limit instead. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memlimit.h"

#define CG_V1 "/sys/fs/cgroup/memory"
#define CG_V2 "/sys/fs/cgroup"

/* A limit file's value; 0 = no limit or unreadable. v1 reports "no limit"
 * as a huge page-rounded number, v2 as "max". */
static uint64_t read_limit(const char *path)
{
	FILE *f = fopen(path, "re");
	if (f == NULL)
		return 0;
	char buf[64] = "";
	char *ok = fgets(buf, sizeof(buf), f);
	fclose(f);
	if (ok == NULL || strncmp(buf, "max", 3) == 0)
		return 0;
	char *end;
	unsigned long long v = strtoull(buf, &end, 10);
	if (end == buf || v >= (1ULL << 62))
		return 0;
	return v;
}

/* The lowest limit on `rel` (a cgroup path) and its ancestors under the
 * mount `base`. If the mount shows a namespaced view, leading components
 * of `rel` may not exist there: drop them until the directory exists. */
static uint64_t lowest_limit(const char *base, const char *rel, const char *file)
{
	char path[8192];
	const char *r = rel;
	for (;;) {
		snprintf(path, sizeof(path), "%s%s/%s", base, r, file);
		FILE *f = fopen(path, "re");
		if (f) {
			fclose(f);
			break;
		}
		const char *next = strchr(r + 1, '/');
		if (r[0] == 0 || next == NULL) {
			r = "";
			break;
		}
		r = next;
	}
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s%s", base, r);
	uint64_t low = 0;
	for (;;) {
		snprintf(path, sizeof(path), "%s/%s", dir, file);
		uint64_t v = read_limit(path);
		if (v && (low == 0 || v < low))
			low = v;
		if (strlen(dir) <= strlen(base))
			break;
		char *slash = strrchr(dir, '/');
		if (slash == NULL)
			break;
		*slash = 0;
	}
	return low;
}

uint64_t memlimit_cgroup_bytes(void)
{
	FILE *f = fopen("/proc/self/cgroup", "re");
	if (f == NULL)
		return 0;
	char line[4096];
	uint64_t low = 0;
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = 0;
		/* "id:controllers:path"; v2 is "0::path" */
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (c2 == NULL)
			continue;
		*c2 = 0;
		const char *ctrl = c1 + 1, *rel = c2 + 1;
		if (strcmp(rel, "/") == 0)
			rel = "";
		uint64_t v = 0;
		if (ctrl[0] == 0) {
			v = lowest_limit(CG_V2, rel, "memory.max");
		} else {
			/* the memory controller, alone or co-mounted ("memory,..." ) */
			char list[256];
			snprintf(list, sizeof(list), ",%s,", ctrl);
			if (strstr(list, ",memory,"))
				v = lowest_limit(CG_V1, rel, "memory.limit_in_bytes");
		}
		if (v && (low == 0 || v < low))
			low = v;
	}
	fclose(f);
	return low;
}

uint64_t memlimit_cap(uint64_t want, uint64_t limit)
{
	if (limit == 0)
		return want;
	/* Leave a quarter (at least 32 MiB) for the coordinator itself: its
	 * catalog, threads and the page cache its loads go through. */
	uint64_t room = limit / 4 > (32ULL << 20) ? limit / 4 : (32ULL << 20);
	uint64_t cap = limit > room ? limit - room : limit / 2;
	return want < cap ? want : cap;
}
