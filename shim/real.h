/* The real libc functions behind the shim's wrappers, resolved once with
 * dlsym(RTLD_NEXT). Only real.c knows about dlsym. A symbol that cannot be
 * resolved falls back to the raw system call where one exists, so a wrapper
 * can always pass through. */
#ifndef DLSHIM_REAL_H
#define DLSHIM_REAL_H

#include <stdio.h>
#include <sys/types.h>
#include <sys/uio.h>

struct real_fns {
	int (*open)(const char *, int, ...);
	int (*open64)(const char *, int, ...);
	int (*openat)(int, const char *, int, ...);
	int (*openat64)(int, const char *, int, ...);
	int (*open_2)(const char *, int);
	int (*open64_2)(const char *, int);
	int (*openat_2)(int, const char *, int);
	int (*openat64_2)(int, const char *, int);
	ssize_t (*read)(int, void *, size_t);
	ssize_t (*read_chk)(int, void *, size_t, size_t);
	ssize_t (*pread)(int, void *, size_t, off_t);
	ssize_t (*pread64)(int, void *, size_t, off64_t);
	ssize_t (*pread_chk)(int, void *, size_t, off_t, size_t);
	ssize_t (*pread64_chk)(int, void *, size_t, off64_t, size_t);
	ssize_t (*readv)(int, const struct iovec *, int);
	ssize_t (*preadv)(int, const struct iovec *, int, off_t);
	ssize_t (*preadv64)(int, const struct iovec *, int, off64_t);
	off_t (*lseek)(int, off_t, int);
	off64_t (*lseek64)(int, off64_t, int);
	int (*close)(int);
	int (*dup)(int);
	int (*dup2)(int, int);
	int (*dup3)(int, int, int);
	int (*fcntl)(int, int, ...);
	int (*fcntl64)(int, int, ...);
	FILE *(*fopen)(const char *, const char *);
	FILE *(*fopen64)(const char *, const char *);
	int (*fclose)(FILE *);
};

extern struct real_fns real;

/* libunwind's local unwinder, loaded on demand with RTLD_LOCAL: linking it
 * into the shim would put its _Unwind_* symbols ahead of libgcc's in every
 * host process (C++ exceptions would go through it). */
struct unwind_fns {
	int (*getcontext)(void *ctx);
	int (*init_local)(void *cursor, void *ctx);
	int (*step)(void *cursor);
	int (*get_reg)(void *cursor, int reg, unsigned long *val);
	int (*get_proc_name)(void *cursor, char *buf, size_t len, unsigned long *off);
};

/* Fill `u` from libunwind.so; -1 when it cannot be loaded. */
int real_load_unwind(struct unwind_fns *u);

/* Resolve every pointer; idempotent and thread-safe. Wrappers call
 * real_init() before their first use because they may run before the
 * library constructor. */
void real_init(void);

#endif
