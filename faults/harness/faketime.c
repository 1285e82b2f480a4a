//go:build ignore

// The constraint above keeps the go tool from treating this file as cgo
// source of package harness; image.go embeds it and gcc compiles it.

/*
 * faketime.c - a tiny LD_PRELOAD library that shifts the wall clock.
 *
 * It overrides clock_gettime, gettimeofday and time. CLOCK_REALTIME and
 * CLOCK_REALTIME_COARSE (and the results of gettimeofday and time) get a
 * millisecond offset added; every other clock (notably CLOCK_MONOTONIC) is
 * passed through untouched.
 *
 * The offset is re-read on every call from the file named by the environment
 * variable REDLOCK_CLOCK_OFFSET_FILE. The file holds a signed decimal integer
 * (milliseconds), optionally surrounded by whitespace. A missing, empty or
 * malformed file means an offset of 0.
 *
 * Debian's libfaketime recurses with jemalloc at redis-server start-up, so this
 * library deliberately avoids dlsym and malloc: the real time comes straight
 * from syscall(SYS_clock_gettime, ...) and the offset file is read with raw
 * openat/read/close system calls. errno is preserved across the file access.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define OFFSET_ENV "REDLOCK_CLOCK_OFFSET_FILE"

static long long read_offset_ms(void) {
	const char *path = getenv(OFFSET_ENV);
	char buf[32];
	long fd, n;
	long long v = 0;
	int neg = 0, digits = 0;
	int i = 0;
	int saved = errno;

	if (path == NULL || path[0] == '\0') {
		return 0;
	}
	fd = syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		errno = saved;
		return 0;
	}
	n = syscall(SYS_read, fd, buf, sizeof(buf) - 1);
	syscall(SYS_close, fd);
	errno = saved;
	if (n <= 0) {
		return 0;
	}
	buf[n] = '\0';

	while (i < n && (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\n' || buf[i] == '\r')) {
		i++;
	}
	if (i < n && (buf[i] == '-' || buf[i] == '+')) {
		neg = buf[i] == '-';
		i++;
	}
	while (i < n && buf[i] >= '0' && buf[i] <= '9' && digits < 15) {
		v = v * 10 + (buf[i] - '0');
		i++;
		digits++;
	}
	if (digits == 0) {
		return 0;
	}
	return neg ? -v : v;
}

static void shift_timespec(struct timespec *ts, long long ms) {
	long long sec = ms / 1000;
	long long nsec = (ms % 1000) * 1000000LL;

	ts->tv_sec += (time_t)sec;
	ts->tv_nsec += (long)nsec;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_nsec -= 1000000000L;
		ts->tv_sec += 1;
	} else if (ts->tv_nsec < 0) {
		ts->tv_nsec += 1000000000L;
		ts->tv_sec -= 1;
	}
}

static int real_realtime(struct timespec *ts) {
	return (int)syscall(SYS_clock_gettime, CLOCK_REALTIME, ts);
}

int clock_gettime(clockid_t clk, struct timespec *ts) {
	if (syscall(SYS_clock_gettime, clk, ts) != 0) {
		return -1;
	}
	if (clk == CLOCK_REALTIME || clk == CLOCK_REALTIME_COARSE) {
		long long off = read_offset_ms();
		if (off != 0) {
			shift_timespec(ts, off);
		}
	}
	return 0;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
	struct timespec ts;

	if (tz != NULL) {
		struct timezone *z = (struct timezone *)tz;
		z->tz_minuteswest = 0;
		z->tz_dsttime = 0;
	}
	/* glibc declares tv nonnull, so it is not checked here. */
	if (real_realtime(&ts) != 0) {
		return -1;
	}
	shift_timespec(&ts, read_offset_ms());
	tv->tv_sec = ts.tv_sec;
	tv->tv_usec = ts.tv_nsec / 1000;
	return 0;
}

time_t time(time_t *out) {
	struct timespec ts;

	if (real_realtime(&ts) != 0) {
		return (time_t)-1;
	}
	shift_timespec(&ts, read_offset_ms());
	if (out != NULL) {
		*out = ts.tv_sec;
	}
	return ts.tv_sec;
}
