/* gs_logrep.h — log a condition that repeats once, then count it.
 *
 * A warning in a retry loop, or on a path a tenant's requests reach, would
 * otherwise be written at every retry or request (the agent wrote the same
 * VMM warning six times in one millisecond, per GPU, at every retry), and a
 * tenant could flood the agent's log.  A struct gs_logrep, one per call site
 * (static), remembers the last GS_LOGREP_SLOTS conditions by a key the
 * caller picks (a GPU and chunk, a pid, ...): the first occurrence of a key
 * is logged; its repeats are counted, and the count is added to the line
 * logged when the key occurs again after interval_ms ("(repeated N times in
 * the last S s)"), when gs_logrep_clear() says the condition is over, or
 * when the slot is taken by another key.  Memory is bounded (the slots and
 * one line each); thread-safe. */
#ifndef GS_LOGREP_H
#define GS_LOGREP_H

#include <pthread.h>
#include <stdint.h>

#include "gs_log.h"

#define GS_LOGREP_SLOTS 8
#define GS_LOGREP_INTERVAL_MS 60000
#define GS_LOGREP_LINE 256

struct gs_logrep_slot {
        uint64_t key;
        uint64_t repeats; /* not logged since last_ms */
        int64_t last_ms;  /* when it was last logged; 0: slot free */
        int level;
        char line[GS_LOGREP_LINE]; /* the last line logged, for the count */
};

struct gs_logrep {
        pthread_mutex_t mu;
        int64_t interval_ms;
        struct gs_logrep_slot slot[GS_LOGREP_SLOTS];
};

#define GS_LOGREP_INIT                                                                \
        {                                                                             \
                .mu = PTHREAD_MUTEX_INITIALIZER, .interval_ms = GS_LOGREP_INTERVAL_MS \
        }

/* Logs the line at level the first time key occurs, and again (with the
 * count) when it occurs interval_ms after it was last logged; counts it
 * otherwise.  Nothing is formatted for a counted repeat. */
void gs_logrep(struct gs_logrep *r, int level, uint64_t key, const char *fmt, ...) GS_PRINTF(4, 5);
/* The condition key is over: its count, if any, is logged with its last
 * line, and its next occurrence is logged again. */
void gs_logrep_clear(struct gs_logrep *r, uint64_t key);
/* Repeats counted and not yet logged, for key (tests, metrics). */
uint64_t gs_logrep_pending(struct gs_logrep *r, uint64_t key);

/* A key from a string (an allocation id, a name): FNV-1a. */
static inline uint64_t gs_logrep_key(const char *s)
{
        uint64_t h = 14695981039346656037ULL;

        for (; *s; s++)
                h = (h ^ (unsigned char)*s) * 1099511628211ULL;
        return h;
}

/* A call site's own gs_logrep: log_warn_rep(key, fmt, ...). */
#define gs_log_rep(level, key, ...)                                       \
        do {                                                              \
                static struct gs_logrep gs_logrep_site_ = GS_LOGREP_INIT; \
                gs_logrep(&gs_logrep_site_, (level), (key), __VA_ARGS__); \
        } while (0)
#define log_warn_rep(key, ...) gs_log_rep(GS_LOG_WARN, (key), __VA_ARGS__)
#define log_info_rep(key, ...) gs_log_rep(GS_LOG_INFO, (key), __VA_ARGS__)

#endif
