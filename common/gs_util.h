/* gs_util.h — small helpers shared by every gshare component.
 *
 * Header-only and libc-only, so the hook may include it too. */
#ifndef GS_UTIL_H
#define GS_UTIL_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#define GS_WUR __attribute__((warn_unused_result))
#define GS_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define GS_LIKELY(x) __builtin_expect(!!(x), 1)
#define GS_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define GS_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define GS_KiB (UINT64_C(1) << 10)
#define GS_MiB (UINT64_C(1) << 20)
#define GS_GiB (UINT64_C(1) << 30)

/* Every pointer gshare hands out is aligned to at least this (CUDA's
 * documented guarantee for its allocation routines). */
#define GS_MIN_ALIGN 256u

static inline uint64_t gs_align_up(uint64_t x, uint64_t a)
{
        return (x + a - 1) & ~(a - 1);
}
static inline int gs_is_pow2(uint64_t x)
{
        return x && !(x & (x - 1));
}
/* *sum += x, saturating at UINT64_MAX (counters a hostile peer feeds). */
static inline void gs_add_sat(uint64_t *sum, uint64_t x)
{
        if (__builtin_add_overflow(*sum, x, sum))
                *sum = UINT64_MAX;
}

/* Closes *fd if open and marks it closed; safe to call twice. */
static inline void gs_closep(int *fd)
{
        if (fd && *fd >= 0) {
                int saved = errno;
                (void)close(*fd);
                *fd = -1;
                errno = saved;
        }
}

/* Negative errno from the current errno, never 0 (a failing call that forgot
 * to set errno still reports failure). */
/* CLOCK_MONOTONIC in nanoseconds and in milliseconds. */
static inline int64_t gs_mono_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline int64_t gs_mono_ms(void)
{
        return gs_mono_ns() / 1000000;
}

/* A spin-wait's pause: tells the CPU we are waiting (x86 PAUSE, arm64
 * YIELD), nothing elsewhere. */
static inline void gs_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
        __asm__ __volatile__("yield" ::: "memory");
#endif
}

static inline int gs_neg_errno(void)
{
        return errno > 0 ? -errno : -EIO;
}

/* Reads fd to its end into buf.  0 with *ret_len bytes, -EFBIG if it holds
 * cap bytes or more (a full buffer cannot tell the end), or a negative
 * errno. */
static inline int gs_read_all(int fd, void *buf, size_t cap, size_t *ret_len)
{
        size_t len = 0;

        while (len < cap) {
                ssize_t n = read(fd, (char *)buf + len, cap - len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return gs_neg_errno();
                if (n == 0) {
                        *ret_len = len;
                        return 0;
                }
                len += (size_t)n;
        }
        return -EFBIG;
}

#endif
