/*
 * bench_core: micro-benchmarks of the shim's core paths (driven by bench/bench_core.sh).
 *
 * It is an ordinary program: it calls open/read/pread/lseek/close through libc,
 * so the same binary measures the plain system (no LD_PRELOAD) and the shim
 * (LD_PRELOAD=build/libdlshim.so); the script runs both and takes differences.
 *
 *   bench_core unrouted FILE N REPS
 *       Per-call cost of calls the shim intercepts but does not route (FILE is
 *       outside DLSHIM_ROOTS): pread of 1 byte, read of 1 byte from /dev/zero,
 *       lseek, and open+close. Prints the best (minimum) of REPS repetitions of
 *       N calls each: the minimum is the least noisy estimate of a fixed cost.
 *
 *   bench_core files DIR PASSES [SEED]
 *       Reads every regular file under DIR, whole, PASSES times in a shuffled
 *       order. Per pass: open-to-first-byte latency (open + first 4 KB read)
 *       percentiles, read bandwidth (bytes / time spent in read calls) and
 *       whole-file throughput (bytes / open-to-close time). A checksum of all
 *       bytes read is printed so the script can check that every pass, with
 *       and without the shim, saw exactly the same bytes.
 *
 *   bench_core evict DIR
 *       Drops the page-cache pages of every file under DIR (posix_fadvise
 *       DONTNEED): the unprivileged fallback for `echo 3 > drop_caches`.
 *
 * Output: one JSON object on stdout. Exit 1 on any I/O error or short read.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FIRST_BYTES 4096

static void die(const char *what, const char *path)
{
    fprintf(stderr, "bench_core: %s %s: %s\n", what, path ? path : "", strerror(errno));
    exit(1);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- unrouted calls ---------------------------------------------------- */

static double best_of(int reps, uint64_t n, double (*loop)(uint64_t, void *), void *arg)
{
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double ns = loop(n, arg);
        if (ns < best)
            best = ns;
    }
    return best;
}

struct unrouted {
    int fd;      /* small regular file outside the roots */
    int zfd;     /* /dev/zero */
    const char *path;
};

static double loop_pread(uint64_t n, void *p)
{
    struct unrouted *u = p;
    char c;
    uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < n; i++)
        if (pread(u->fd, &c, 1, 0) != 1)
            die("pread", u->path);
    return (double)(now_ns() - t0) / (double)n;
}

static double loop_read_zero(uint64_t n, void *p)
{
    struct unrouted *u = p;
    char c;
    uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < n; i++)
        if (read(u->zfd, &c, 1) != 1)
            die("read", "/dev/zero");
    return (double)(now_ns() - t0) / (double)n;
}

static double loop_lseek(uint64_t n, void *p)
{
    struct unrouted *u = p;
    uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < n; i++)
        if (lseek(u->fd, 0, SEEK_SET) != 0)
            die("lseek", u->path);
    return (double)(now_ns() - t0) / (double)n;
}

static double loop_open_close(uint64_t n, void *p)
{
    struct unrouted *u = p;
    uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < n; i++) {
        int fd = open(u->path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            die("open", u->path);
        close(fd);
    }
    return (double)(now_ns() - t0) / (double)n;
}

static int cmd_unrouted(const char *path, uint64_t n, int reps)
{
    struct unrouted u = {.path = path};
    u.fd = open(path, O_RDONLY | O_CLOEXEC);
    if (u.fd < 0)
        die("open", path);
    u.zfd = open("/dev/zero", O_RDONLY | O_CLOEXEC);
    if (u.zfd < 0)
        die("open", "/dev/zero");
    /* open+close is ~10x dearer than the others: fewer iterations, same time. */
    uint64_t n_open = n / 10 ? n / 10 : 1;
    double pr = best_of(reps, n, loop_pread, &u);
    double rz = best_of(reps, n, loop_read_zero, &u);
    double ls = best_of(reps, n, loop_lseek, &u);
    double oc = best_of(reps, n_open, loop_open_close, &u);
    printf("{\"mode\":\"unrouted\",\"n\":%" PRIu64 ",\"reps\":%d,\"pread_ns\":%.1f,"
           "\"read_devzero_ns\":%.1f,\"lseek_ns\":%.1f,\"open_close_ns\":%.1f}\n",
           n, reps, pr, rz, ls, oc);
    close(u.fd);
    close(u.zfd);
    return 0;
}

/* ---- whole-file reads ---------------------------------------------------- */

struct file {
    char *path;
    size_t size;
};

struct list {
    struct file *v;
    size_t n, cap;
    size_t max_size;
};

static void list_add(struct list *l, const char *path, size_t size)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 1024;
        l->v = realloc(l->v, l->cap * sizeof *l->v);
        if (!l->v)
            die("realloc", NULL);
    }
    l->v[l->n].path = strdup(path);
    l->v[l->n].size = size;
    if (!l->v[l->n].path)
        die("strdup", NULL);
    l->n++;
    if (size > l->max_size)
        l->max_size = size;
}

static void scan(struct list *l, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        die("opendir", dir);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[4096];
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= sizeof path)
            continue;
        struct stat st;
        if (lstat(path, &st) != 0)
            die("lstat", path);
        if (S_ISDIR(st.st_mode))
            scan(l, path);
        else if (S_ISREG(st.st_mode))
            list_add(l, path, (size_t)st.st_size);
    }
    closedir(d);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Order-independent checksum of a file's bytes (summed over files), so that
 * passes in different orders can be compared. */
static uint64_t file_sum(const unsigned char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 1099511628211ull;
    }
    for (; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static uint64_t rng_state;
static uint64_t rng_next(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static int cmd_files(const char *dir, int passes, uint64_t seed)
{
    struct list l = {0};
    scan(&l, dir);
    if (l.n == 0) {
        fprintf(stderr, "bench_core: no files under %s\n", dir);
        return 1;
    }
    unsigned char *buf = malloc(l.max_size + 1);
    uint64_t *ofb = malloc(l.n * sizeof *ofb);
    if (!buf || !ofb)
        die("malloc", NULL);
    rng_state = seed ? seed : 88172645463325252ull;

    printf("{\"mode\":\"files\",\"files\":%zu,\"passes\":[", l.n);
    for (int pass = 1; pass <= passes; pass++) {
        /* Fisher-Yates shuffle: a training job's random access order. */
        for (size_t i = l.n - 1; i > 0; i--) {
            size_t j = rng_next() % (i + 1);
            struct file t = l.v[i];
            l.v[i] = l.v[j];
            l.v[j] = t;
        }
        uint64_t bytes = 0, read_ns = 0, file_ns = 0, sum = 0;
        uint64_t t_pass = now_ns();
        for (size_t k = 0; k < l.n; k++) {
            const struct file *f = &l.v[k];
            uint64_t t0 = now_ns();
            int fd = open(f->path, O_RDONLY | O_CLOEXEC);
            if (fd < 0)
                die("open", f->path);
            uint64_t t1 = now_ns();
            size_t got = 0;
            ssize_t r;
            /* First 4 KB: what a decoder needs to start working. */
            while (got < FIRST_BYTES && (r = read(fd, buf + got, FIRST_BYTES - got)) != 0) {
                if (r < 0) {
                    if (errno == EINTR)
                        continue;
                    die("read", f->path);
                }
                got += (size_t)r;
            }
            uint64_t t2 = now_ns();
            /* The rest, asking for one byte more than expected to see EOF. */
            while ((r = read(fd, buf + got, l.max_size + 1 - got)) != 0) {
                if (r < 0) {
                    if (errno == EINTR)
                        continue;
                    die("read", f->path);
                }
                got += (size_t)r;
                if (got > l.max_size)
                    break;
            }
            uint64_t t3 = now_ns();
            close(fd);
            uint64_t t4 = now_ns();
            if (got != f->size) {
                fprintf(stderr, "bench_core: %s: read %zu bytes, expected %zu\n", f->path, got, f->size);
                return 1;
            }
            ofb[k] = t2 - t0;
            read_ns += (t2 - t1) + (t3 - t2);
            file_ns += t4 - t0;
            bytes += got;
            sum += file_sum(buf, got); /* outside the timed regions */
        }
        double secs = (double)(now_ns() - t_pass) / 1e9;
        qsort(ofb, l.n, sizeof *ofb, cmp_u64);
        double mean = 0;
        for (size_t k = 0; k < l.n; k++)
            mean += (double)ofb[k];
        mean /= (double)l.n;
        printf("%s{\"pass\":%d,\"bytes\":%" PRIu64 ",\"seconds\":%.4f,"
               "\"ofb_p50_us\":%.2f,\"ofb_p90_us\":%.2f,\"ofb_p99_us\":%.2f,\"ofb_mean_us\":%.2f,"
               "\"read_gbps\":%.3f,\"file_gbps\":%.3f,\"checksum\":\"%016" PRIx64 "\"}",
               pass > 1 ? "," : "", pass, bytes, secs,
               (double)ofb[l.n / 2] / 1e3, (double)ofb[l.n * 9 / 10] / 1e3,
               (double)ofb[l.n * 99 / 100] / 1e3, mean / 1e3,
               read_ns ? (double)bytes / (double)read_ns : 0.0,
               file_ns ? (double)bytes / (double)file_ns : 0.0, sum);
        fflush(stdout);
    }
    printf("]}\n");
    for (size_t i = 0; i < l.n; i++)
        free(l.v[i].path);
    free(l.v);
    free(buf);
    free(ofb);
    return 0;
}

static int cmd_evict(const char *dir)
{
    struct list l = {0};
    scan(&l, dir);
    for (size_t i = 0; i < l.n; i++) {
        int fd = open(l.v[i].path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            die("open", l.v[i].path);
        /* Dirty pages cannot be dropped: write them back first. */
        if (fdatasync(fd) != 0)
            die("fdatasync", l.v[i].path);
        int e = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        if (e != 0) {
            errno = e;
            die("posix_fadvise", l.v[i].path);
        }
        close(fd);
        free(l.v[i].path);
    }
    free(l.v);
    return 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_core unrouted FILE N REPS\n"
                    "       bench_core files DIR PASSES [SEED]\n"
                    "       bench_core evict DIR\n");
    exit(2);
}

int main(int argc, char **argv)
{
    if (argc >= 5 && strcmp(argv[1], "unrouted") == 0)
        return cmd_unrouted(argv[2], strtoull(argv[3], NULL, 10), atoi(argv[4]));
    if ((argc == 4 || argc == 5) && strcmp(argv[1], "files") == 0)
        return cmd_files(argv[2], atoi(argv[3]), argc == 5 ? strtoull(argv[4], NULL, 10) : 0);
    if (argc == 3 && strcmp(argv[1], "evict") == 0)
        return cmd_evict(argv[2]);
    usage();
    return 2;
}
