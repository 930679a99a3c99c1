/* Resolution of the real libc functions (HDF5 ones are found by h5real.c). */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "real.h"

struct real_fns real;

/* Raw system-call fallbacks used until (or if ever) dlsym fails, so that a
 * wrapper always has something to call. */
static ssize_t sys_read(int fd, void *b, size_t n) { return syscall(SYS_read, fd, b, n); }
static ssize_t sys_pread(int fd, void *b, size_t n, off_t o) { return syscall(SYS_pread64, fd, b, n, o); }
static off_t sys_lseek(int fd, off_t o, int w) { return syscall(SYS_lseek, fd, o, w); }
static int sys_close(int fd) { return (int)syscall(SYS_close, fd); }
static int sys_openat(int dirfd, const char *p, int fl, ...)
{
	va_list ap;
	va_start(ap, fl);
	mode_t m = va_arg(ap, mode_t);
	va_end(ap);
	return (int)syscall(SYS_openat, dirfd, p, fl, m);
}

static pthread_once_t once = PTHREAD_ONCE_INIT;

static void bind(void **slot, const char *name, void *fallback)
{
	void *p = dlsym(RTLD_NEXT, name);
	*slot = p ? p : fallback;
}
#define BIND(field, name, fallback) bind((void **)&real.field, name, (void *)(fallback))

static void resolve(void)
{
	BIND(open, "open", NULL);
	BIND(open64, "open64", NULL);
	BIND(openat, "openat", sys_openat);
	BIND(openat64, "openat64", sys_openat);
	BIND(open_2, "__open_2", NULL);
	BIND(open64_2, "__open64_2", NULL);
	BIND(openat_2, "__openat_2", NULL);
	BIND(openat64_2, "__openat64_2", NULL);
	BIND(read, "read", sys_read);
	BIND(read_chk, "__read_chk", NULL);
	BIND(pread, "pread", sys_pread);
	BIND(pread64, "pread64", sys_pread);
	BIND(pread_chk, "__pread_chk", NULL);
	BIND(pread64_chk, "__pread64_chk", NULL);
	BIND(readv, "readv", NULL);
	BIND(preadv, "preadv", NULL);
	BIND(preadv64, "preadv64", NULL);
	BIND(lseek, "lseek", sys_lseek);
	BIND(lseek64, "lseek64", sys_lseek);
	BIND(close, "close", sys_close);
	BIND(dup, "dup", NULL);
	BIND(dup2, "dup2", NULL);
	BIND(dup3, "dup3", NULL);
	BIND(fcntl, "fcntl", NULL);
	BIND(fcntl64, "fcntl64", NULL);
	BIND(fopen, "fopen", NULL);
	BIND(fopen64, "fopen64", NULL);
	BIND(fclose, "fclose", NULL);
}

int real_load_unwind(struct unwind_fns *u)
{
	void *h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
	if (h == NULL)
		return -1;
	u->getcontext = (int (*)(void *))dlsym(h, "_Ux86_64_getcontext");
	u->init_local = (int (*)(void *, void *))dlsym(h, "_ULx86_64_init_local");
	u->step = (int (*)(void *))dlsym(h, "_ULx86_64_step");
	u->get_reg = (int (*)(void *, int, unsigned long *))dlsym(h, "_ULx86_64_get_reg");
	u->get_proc_name = (int (*)(void *, char *, size_t, unsigned long *))dlsym(h, "_ULx86_64_get_proc_name");
	if (!u->getcontext || !u->init_local || !u->step || !u->get_reg || !u->get_proc_name)
		return -1;
	return 0;
}

void real_init(void)
{
	if (real.close == NULL)
		pthread_once(&once, resolve);
}
