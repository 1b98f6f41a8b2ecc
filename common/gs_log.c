/* gs_log.c — see gs_log.h. */
#include "gs_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

static const char *log_name = "gshare";
static int log_level = GS_LOG_INFO;

void gs_log_init(const char *name, int level)
{
        log_name = name;
        log_level = level;
}

void gs_log_set_level(int level)
{
        log_level = level;
}
int gs_log_get_level(void)
{
        return log_level;
}

int gs_log_parse_level(const char *s)
{
        static const char *const names[] = { "error", "warn", "info", "debug" };

        if (!s)
                return -EINVAL;
        for (size_t i = 0; i < GS_ARRAY_SIZE(names); i++)
                if (strcasecmp(s, names[i]) == 0)
                        return (int)i;
        if (s[0] >= '0' && s[0] <= '3' && s[1] == '\0')
                return s[0] - '0';
        return -EINVAL;
}

void gs_log(int level, const char *fmt, ...)
{
        static const char *const tags[] = { "ERROR", "WARN", "INFO", "DEBUG" };
        char line[1024];
        struct timespec ts;
        struct tm tm;
        va_list ap;
        int saved = errno; /* so callers may log "%m" after us */

        if (level > log_level)
                return;
        if (level < 0)
                level = 0;
        if (level > GS_LOG_DEBUG)
                level = GS_LOG_DEBUG;
        clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        errno = saved;
        va_start(ap, fmt);
        vsnprintf(line, sizeof(line), fmt, ap);
        va_end(ap);
        /* One fprintf per line so concurrent threads do not interleave. */
        fprintf(stderr, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s %s: %s\n", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, tags[level], log_name, line);
        errno = saved;
}
