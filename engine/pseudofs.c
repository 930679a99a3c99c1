/* Pseudo file systems (see scan.h): their regular files are generated on
 * read and report a size (0, 4096) unrelated to their content, so a cache
 * entry built from the size would be wrong. */
#include <linux/magic.h>
#include <sys/vfs.h>

#include "dlshim/scan.h"

#ifndef CONFIGFS_MAGIC
#define CONFIGFS_MAGIC 0x62656570
#endif
#ifndef FUSECTL_SUPER_MAGIC
#define FUSECTL_SUPER_MAGIC 0x65735543
#endif

int dlshim_pseudo_fs(long f_type)
{
	switch ((unsigned long)f_type & 0xffffffffUL) {
	case PROC_SUPER_MAGIC:
	case SYSFS_MAGIC:
	case DEBUGFS_MAGIC:
	case TRACEFS_MAGIC:
	case SECURITYFS_MAGIC:
	case SELINUX_MAGIC:
	case SMACK_MAGIC:
	case CGROUP_SUPER_MAGIC:
	case CGROUP2_SUPER_MAGIC:
	case CONFIGFS_MAGIC:
	case BPF_FS_MAGIC:
	case PSTOREFS_MAGIC:
	case EFIVARFS_MAGIC:
	case FUSECTL_SUPER_MAGIC:
	case DEVPTS_SUPER_MAGIC:
		return 1;
	default:
		return 0;
	}
}

int dlshim_fd_on_pseudo_fs(int fd)
{
	struct statfs sf;
	/* Unknown (fstatfs failed) counts as pseudo: never cache what we
	 * cannot classify. */
	return fstatfs(fd, &sf) < 0 || dlshim_pseudo_fs((long)sf.f_type);
}
