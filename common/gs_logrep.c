/* gs_logrep.c — see gs_logrep.h. */
#include "gs_logrep.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

static void report(const struct gs_logrep_slot *s, int64_t now)
{
        if (s->repeats)
                gs_log(s->level, "%s (repeated %llu times in the last %lld s)", s->line, (unsigned long long)s->repeats,
                       (long long)((now - s->last_ms + 999) / 1000));
}

static struct gs_logrep_slot *find(struct gs_logrep *r, uint64_t key)
{
        for (size_t i = 0; i < GS_LOGREP_SLOTS; i++)
                if (r->slot[i].last_ms && r->slot[i].key == key)
                        return &r->slot[i];
        return NULL;
}

void gs_logrep(struct gs_logrep *r, int level, uint64_t key, const char *fmt, ...)
{
        struct gs_logrep_slot *s;
        int64_t now;
        va_list ap;
        int saved = errno; /* for a "%m" in fmt */

        if (level > gs_log_get_level())
                return;
        /* 0 marks a free slot: a real time is never 0. */
        now = gs_mono_ms() + 1;
        pthread_mutex_lock(&r->mu);
        s = find(r, key);
        if (s && now - s->last_ms < r->interval_ms) {
                s->repeats++;
                pthread_mutex_unlock(&r->mu);
                return;
        }
        if (!s) {
                /* A free slot, or the one logged longest ago (its count
                 * logged first). */
                s = &r->slot[0];
                for (size_t i = 0; i < GS_LOGREP_SLOTS && s->last_ms; i++)
                        if (!r->slot[i].last_ms || r->slot[i].last_ms < s->last_ms)
                                s = &r->slot[i];
                if (s->last_ms)
                        report(s, now);
                s->repeats = 0;
        }
        s->key = key;
        s->level = level;
        errno = saved;
        va_start(ap, fmt);
        vsnprintf(s->line, sizeof(s->line), fmt, ap);
        va_end(ap);
        if (s->repeats)
                report(s, now);
        else
                gs_log(level, "%s", s->line);
        s->repeats = 0;
        s->last_ms = now;
        pthread_mutex_unlock(&r->mu);
}

void gs_logrep_clear(struct gs_logrep *r, uint64_t key)
{
        struct gs_logrep_slot *s;

        pthread_mutex_lock(&r->mu);
        s = find(r, key);
        if (s) {
                report(s, gs_mono_ms() + 1);
                s->last_ms = 0;
                s->repeats = 0;
        }
        pthread_mutex_unlock(&r->mu);
}

uint64_t gs_logrep_pending(struct gs_logrep *r, uint64_t key)
{
        struct gs_logrep_slot *s;
        uint64_t n;

        pthread_mutex_lock(&r->mu);
        s = find(r, key);
        n = s ? s->repeats : 0;
        pthread_mutex_unlock(&r->mu);
        return n;
}
