/*
 * faultfs: an LD_PRELOAD shim that makes the file system fail on demand,
 * for crates/cairn/tests/faults.rs.
 *
 * While the file named by CAIRN_FAULT_CONTROL exists, calls on files whose
 * path starts with CAIRN_FAULT_DIR fail with the fault the file names:
 *
 *   enospc     write, pwrite, writev, ftruncate, fallocate: ENOSPC (disk full)
 *   eio-write  the same calls: EIO
 *   eio-fsync  fsync, fdatasync, sync_file_range: EIO
 *   erofs      opening for writing and every write call: EROFS (the file
 *              system or the file made read-only; root ignores permission
 *              bits, so chmod cannot show this)
 *
 * Removing the control file ends the fault: that is how a test shows that
 * the server recovers without a restart. Everything else passes through to
 * the C library. The control file is read on every intercepted call (with
 * raw system calls, so the shim never calls itself): a test switches a
 * fault on and off without talking to the process.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

enum fault { NONE, ENOSPC_WRITE, EIO_WRITE, EIO_FSYNC, EROFS_ALL };

/* The fault switched on now (NONE without a control file). */
static enum fault current(void) {
    const char *control = getenv("CAIRN_FAULT_CONTROL");
    if (!control) return NONE;
    int saved = errno;
    long fd = syscall(SYS_openat, AT_FDCWD, control, O_RDONLY | O_CLOEXEC);
    if (fd < 0) { errno = saved; return NONE; }
    char buf[32] = {0};
    long n = syscall(SYS_read, (int)fd, buf, sizeof buf - 1);
    syscall(SYS_close, (int)fd);
    errno = saved;
    if (n <= 0) return NONE;
    if (strncmp(buf, "enospc", 6) == 0) return ENOSPC_WRITE;
    if (strncmp(buf, "eio-write", 9) == 0) return EIO_WRITE;
    if (strncmp(buf, "eio-fsync", 9) == 0) return EIO_FSYNC;
    if (strncmp(buf, "erofs", 5) == 0) return EROFS_ALL;
    return NONE;
}

static int under_dir(const char *path) {
    const char *dir = getenv("CAIRN_FAULT_DIR");
    return dir && *dir && path && strncmp(path, dir, strlen(dir)) == 0;
}

/* Whether fd is a file under CAIRN_FAULT_DIR (its path from /proc). */
static int fd_under_dir(int fd) {
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    int saved = errno;
    long n = syscall(SYS_readlinkat, AT_FDCWD, link, path, sizeof path - 1);
    errno = saved;
    if (n <= 0) return 0;
    path[n] = 0;
    return under_dir(path);
}

/* The errno a write call on fd fails with now, or 0. */
static int write_fault(int fd) {
    enum fault f = current();
    int e = f == ENOSPC_WRITE ? ENOSPC : f == EIO_WRITE ? EIO : f == EROFS_ALL ? EROFS : 0;
    return e && fd_under_dir(fd) ? e : 0;
}

static int sync_fault(int fd) {
    return current() == EIO_FSYNC && fd_under_dir(fd) ? EIO : 0;
}

#define NEXT(name) static __typeof__(name) *next_##name; \
    if (!next_##name) next_##name = (__typeof__(name) *)dlsym(RTLD_NEXT, #name)
#define FAIL(e) do { errno = (e); return -1; } while (0)

ssize_t write(int fd, const void *buf, size_t n) {
    NEXT(write);
    int e = write_fault(fd);
    if (e) FAIL(e);
    return next_write(fd, buf, n);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
    NEXT(pwrite);
    int e = write_fault(fd);
    if (e) FAIL(e);
    return next_pwrite(fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t off) {
    NEXT(pwrite64);
    int e = write_fault(fd);
    if (e) FAIL(e);
    return next_pwrite64(fd, buf, n, off);
}

ssize_t writev(int fd, const struct iovec *iov, int count) {
    NEXT(writev);
    int e = write_fault(fd);
    if (e) FAIL(e);
    return next_writev(fd, iov, count);
}

ssize_t pwritev(int fd, const struct iovec *iov, int count, off_t off) {
    NEXT(pwritev);
    int e = write_fault(fd);
    if (e) FAIL(e);
    return next_pwritev(fd, iov, count, off);
}

int ftruncate(int fd, off_t len) {
    NEXT(ftruncate);
    int e = write_fault(fd);
    if (e) FAIL(e);
    return next_ftruncate(fd, len);
}

int ftruncate64(int fd, off64_t len) {
    NEXT(ftruncate64);
    int e = write_fault(fd);
    if (e) FAIL(e);
    return next_ftruncate64(fd, len);
}

int fallocate(int fd, int mode, off_t off, off_t len) {
    NEXT(fallocate);
    int e = write_fault(fd);
    if (e) FAIL(e);
    return next_fallocate(fd, mode, off, len);
}

int posix_fallocate(int fd, off_t off, off_t len) {
    NEXT(posix_fallocate);
    int e = write_fault(fd);
    /* posix_fallocate returns the error instead of setting errno. */
    if (e) return e;
    return next_posix_fallocate(fd, off, len);
}

int fsync(int fd) {
    NEXT(fsync);
    int e = sync_fault(fd);
    if (e) FAIL(e);
    return next_fsync(fd);
}

int fdatasync(int fd) {
    NEXT(fdatasync);
    int e = sync_fault(fd);
    if (e) FAIL(e);
    return next_fdatasync(fd);
}

/* Opening a file under the directory for writing, while read-only. */
static int open_fault(const char *path, int flags) {
    if ((flags & O_ACCMODE) == O_RDONLY && !(flags & (O_CREAT | O_TRUNC))) return 0;
    if (current() != EROFS_ALL) return 0;
    if (path && path[0] == '/') return under_dir(path) ? EROFS : 0;
    /* A relative path: resolve it against the working directory. */
    char cwd[4096];
    int saved = errno;
    long n = syscall(SYS_getcwd, cwd, sizeof cwd);
    errno = saved;
    return n > 0 && under_dir(cwd) ? EROFS : 0;
}

static mode_t mode_of(int flags, va_list ap) {
    return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? va_arg(ap, mode_t) : 0;
}

int open(const char *path, int flags, ...) {
    NEXT(open);
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_of(flags, ap);
    va_end(ap);
    int e = open_fault(path, flags);
    if (e) FAIL(e);
    return next_open(path, flags, mode);
}

int open64(const char *path, int flags, ...) {
    NEXT(open64);
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_of(flags, ap);
    va_end(ap);
    int e = open_fault(path, flags);
    if (e) FAIL(e);
    return next_open64(path, flags, mode);
}

int openat(int dirfd, const char *path, int flags, ...) {
    NEXT(openat);
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_of(flags, ap);
    va_end(ap);
    int e = path[0] == '/' || dirfd == AT_FDCWD ? open_fault(path, flags) : 0;
    if (e) FAIL(e);
    return next_openat(dirfd, path, flags, mode);
}

int openat64(int dirfd, const char *path, int flags, ...) {
    NEXT(openat64);
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_of(flags, ap);
    va_end(ap);
    int e = path[0] == '/' || dirfd == AT_FDCWD ? open_fault(path, flags) : 0;
    if (e) FAIL(e);
    return next_openat64(dirfd, path, flags, mode);
}
