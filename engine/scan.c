/* Dataset listing for the coordinator (see scan.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "dlshim/config.h"
#include "dlshim/scan.h"

struct walk {
	dlshim_scan_fn fn;
	void *ctx;
	const char *root;
	long n;
	int stop;
};

static int on_pseudo_fs(const char *path)
{
	struct statfs sf;
	return statfs(path, &sf) < 0 || dlshim_pseudo_fs((long)sf.f_type);
}

static void walk_dir(struct walk *w, char *path, size_t len, int depth)
{
	if (depth > 64 || w->stop)
		return;
	DIR *d = opendir(path);
	if (d == NULL)
		return; /* unreadable directories are simply not part of the dataset */
	struct stat dst;
	if (dlshim_fd_on_pseudo_fs(dirfd(d)) || fstat(dirfd(d), &dst) < 0) {
		closedir(d); /* a procfs or sysfs mounted under a root is not data */
		return;
	}
	struct dirent *de;
	while (!w->stop && (de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		size_t nl = strlen(de->d_name);
		if (len + 1 + nl + 1 > DLSHIM_PATH_MAX)
			continue;
		struct stat st;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		path[len] = '/';
		memcpy(path + len + 1, de->d_name, nl + 1);
		if (S_ISDIR(st.st_mode)) {
			walk_dir(w, path, len + 1 + nl, depth + 1);
		} else {
			/* A symlink to a regular file counts as that file. */
			if (S_ISLNK(st.st_mode) && stat(path, &st) < 0)
				st.st_mode = 0;
			/* Another device than the directory's (a file bind-mounted or
			 * linked from elsewhere): ask its file system once. */
			if (S_ISREG(st.st_mode) && st.st_dev != dst.st_dev && on_pseudo_fs(path))
				st.st_mode = 0;
			if (S_ISREG(st.st_mode)) {
				w->n++;
				if (w->fn(w->ctx, path, &st, w->root))
					w->stop = 1;
			}
		}
		path[len] = 0;
	}
	closedir(d);
}

static long scan_list(const char *list, struct walk *w, char *err, size_t errlen)
{
	FILE *f = fopen(list, "re");
	if (f == NULL) {
		snprintf(err, errlen, "DLSHIM_FILELIST=%s cannot be read: %s", list, strerror(errno));
		return -1;
	}
	char dir[DLSHIM_PATH_MAX], line[DLSHIM_PATH_MAX], abs[DLSHIM_PATH_MAX];
	snprintf(dir, sizeof(dir), "%s", list);
	char *slash = strrchr(dir, '/');
	if (slash)
		*slash = 0;
	w->root = list;
	while (!w->stop && fgets(line, sizeof(line), f)) {
		size_t l = strcspn(line, "\r\n");
		line[l] = 0;
		if (l == 0 || line[0] == '#')
			continue;
		if (dlshim_path_normalize(dir, line, abs, sizeof(abs)) < 0)
			continue;
		struct stat st;
		int rc = stat(abs, &st);
		if (rc == 0 && S_ISREG(st.st_mode) && !on_pseudo_fs(abs)) {
			w->n++;
			if (w->fn(w->ctx, abs, &st, list))
				w->stop = 1;
		} else if (rc < 0 && errno == ENOENT && w->fn(w->ctx, abs, NULL, list)) {
			w->stop = 1; /* not here: another node may have it */
		}
	}
	fclose(f);
	return w->n;
}

long dlshim_scan(const char *roots, const char *filelist, dlshim_scan_fn fn, void *ctx, char *err, size_t errlen)
{
	struct walk w = {.fn = fn, .ctx = ctx};
	if (filelist && filelist[0])
		return scan_list(filelist, &w, err, errlen);
	char path[DLSHIM_PATH_MAX];
	const char *p = roots;
	while (p && *p && !w.stop) {
		const char *comma = strchr(p, ',');
		size_t n = comma ? (size_t)(comma - p) : strlen(p);
		if (n > 0 && n < sizeof(path)) {
			memcpy(path, p, n);
			path[n] = 0;
			while (n > 1 && path[n - 1] == '/')
				path[--n] = 0;
			w.root = path;
			struct stat st;
			int is_file = stat(path, &st) == 0 && S_ISREG(st.st_mode);
			if (is_file && on_pseudo_fs(path)) {
				/* a pseudo file named as a root is not data */
			} else if (is_file) {
				w.n++;
				if (fn(ctx, path, &st, path))
					w.stop = 1;
			} else {
				/* walk_dir writes below `path`; keep the root's own copy. */
				char root[DLSHIM_PATH_MAX];
				memcpy(root, path, n + 1);
				w.root = root;
				walk_dir(&w, path, n, 0);
			}
		}
		p = comma ? comma + 1 : NULL;
	}
	return w.n;
}
