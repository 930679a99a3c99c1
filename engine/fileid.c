/* Which stat fields make a file version. ctime is there because mtime can
 * be set back by a program (rsync, tar, touch -d) after a rewrite in place,
 * and because a new file may reuse a deleted one's inode number with the
 * same size and mtime; ctime cannot be set from user space. */
#include "dlshim/fileid.h"

static int64_t ns(const struct timespec *t) { return (int64_t)t->tv_sec * 1000000000LL + t->tv_nsec; }

struct dlshim_file_id dlshim_stat_version(const struct stat *st)
{
	return (struct dlshim_file_id){(uint64_t)st->st_dev, (uint64_t)st->st_ino, (uint64_t)st->st_size,
				       ns(&st->st_mtim), ns(&st->st_ctim)};
}

int dlshim_stat_is_version(const struct stat *st, const struct dlshim_file_id *id)
{
	struct dlshim_file_id v = dlshim_stat_version(st);
	return S_ISREG(st->st_mode) && v.dev == id->dev && v.ino == id->ino && v.size == id->size &&
	       v.mtime_ns == id->mtime_ns && v.ctime_ns == id->ctime_ns;
}
