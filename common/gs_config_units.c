/* gs_config_units.c — the units of configuration values: sizes (a byte
 * count, or Ki, Mi, Gi, Ti) and durations (ms, s, m, h), parsed and
 * formatted (declared in gs_config.h). */
#include "gs_config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static const struct {
        const char *suffix;
        unsigned shift;
} size_suffixes[] = { { "Ti", 40 }, { "Gi", 30 }, { "Mi", 20 }, { "Ki", 10 } };

int gs_parse_size(const char *s, uint64_t *ret_bytes)
{
        uint64_t v = 0;
        const char *p = s;
        unsigned shift = 0;

        if (!s || *s < '0' || *s > '9')
                return -EINVAL;
        for (; *p >= '0' && *p <= '9'; p++) {
                unsigned d = (unsigned)(*p - '0');
                if (v > (UINT64_MAX - d) / 10)
                        return -ERANGE;
                v = v * 10 + d;
        }
        if (*p) {
                size_t i;
                for (i = 0; i < GS_ARRAY_SIZE(size_suffixes); i++)
                        if (strcmp(p, size_suffixes[i].suffix) == 0)
                                break;
                if (i == GS_ARRAY_SIZE(size_suffixes))
                        return -EINVAL;
                shift = size_suffixes[i].shift;
        }
        if (shift && v > (UINT64_MAX >> shift))
                return -ERANGE;
        *ret_bytes = v << shift;
        return 0;
}

#define DURATION_MAX_MS (24ull * 3600 * 1000)

int gs_parse_duration_ms(const char *s, uint32_t *ret_ms)
{
        static const struct {
                const char *unit;
                uint64_t ms;
        } units[] = { { "ms", 1 }, { "s", 1000 }, { "m", 60 * 1000 }, { "h", 3600 * 1000 }, { "", 1000 } };
        uint64_t whole = 0, frac = 0, frac_div = 1;
        const char *p = s;
        size_t i;

        if (!s || *s < '0' || *s > '9')
                return -EINVAL;
        for (; *p >= '0' && *p <= '9'; p++) {
                whole = whole * 10 + (uint64_t)(*p - '0');
                if (whole > DURATION_MAX_MS)
                        return -ERANGE;
        }
        if (*p == '.') {
                p++;
                if (*p < '0' || *p > '9')
                        return -EINVAL;
                /* Digits past the ninth cannot matter at millisecond resolution. */
                for (; *p >= '0' && *p <= '9'; p++)
                        if (frac_div < 1000000000ull) {
                                frac = frac * 10 + (uint64_t)(*p - '0');
                                frac_div *= 10;
                        }
        }
        for (i = 0; i < GS_ARRAY_SIZE(units); i++)
                if (strcmp(p, units[i].unit) == 0)
                        break;
        if (i == GS_ARRAY_SIZE(units))
                return -EINVAL;
        if (whole > DURATION_MAX_MS / units[i].ms)
                return -ERANGE;
        whole = whole * units[i].ms + (frac * units[i].ms + frac_div / 2) / frac_div;
        if (whole > DURATION_MAX_MS)
                return -ERANGE;
        *ret_ms = (uint32_t)whole;
        return 0;
}

void gs_format_size(uint64_t bytes, char *buf, size_t n)
{
        if (bytes == 0) {
                snprintf(buf, n, "0");
                return;
        }
        for (size_t i = 0; i < GS_ARRAY_SIZE(size_suffixes); i++) {
                uint64_t unit = UINT64_C(1) << size_suffixes[i].shift;
                if (bytes % unit == 0) {
                        snprintf(buf, n, "%llu%s", (unsigned long long)(bytes / unit), size_suffixes[i].suffix);
                        return;
                }
        }
        snprintf(buf, n, "%llu", (unsigned long long)bytes);
}
