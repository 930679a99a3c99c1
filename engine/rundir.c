/* Runtime directory checks shared by the shim, the coordinator and the CLI. */
#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dlshim/rundir.h"

int rundir_ensure(const char *dir)
{
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return -1;
	return rundir_check(dir);
}

int rundir_check(const char *dir)
{
	struct stat st;
	if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077))
		return -1;
	return 0;
}

int rundir_sock_path(const char *dir, char *out, size_t len)
{
	int n = snprintf(out, len, "%s/sock", dir);
	return (n < 0 || (size_t)n >= len) ? -1 : 0;
}
