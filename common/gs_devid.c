/* gs_devid.c — see gs_devid.h. */
#include "gs_devid.h"

#include <stdio.h>
#include <string.h>

/* Positions of the dashes in the 36-character UUID body. */
static int is_dash_pos(size_t i)
{
        return i == 8 || i == 13 || i == 18 || i == 23;
}

static int hexval(char c)
{
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
}

void gs_uuid_format(const uint8_t raw[16], char *out)
{
        static const char hex[] = "0123456789abcdef";
        size_t o = 4, b = 0;

        memcpy(out, "GPU-", 4);
        for (size_t i = 0; i < 36; i++) {
                if (is_dash_pos(i)) {
                        out[o++] = '-';
                        continue;
                }
                out[o++] = hex[(raw[b / 2] >> ((b % 2) ? 0 : 4)) & 0xf];
                b++;
        }
        out[o] = '\0';
}

int gs_uuid_parse(const char *s, uint8_t ret_raw[16])
{
        uint8_t raw[16] = { 0 };
        size_t b = 0;

        if (!s || strlen(s) != GS_UUID_STR_LEN || strncmp(s, "GPU-", 4) != 0)
                return -EINVAL;
        s += 4;
        for (size_t i = 0; i < 36; i++) {
                int v;
                if (is_dash_pos(i)) {
                        if (s[i] != '-')
                                return -EINVAL;
                        continue;
                }
                v = hexval(s[i]);
                if (v < 0)
                        return -EINVAL;
                raw[b / 2] |= (uint8_t)(v << ((b % 2) ? 0 : 4));
                b++;
        }
        memcpy(ret_raw, raw, sizeof(raw));
        return 0;
}

int gs_devid_format(char *buf, size_t n, const char *uuid, uint32_t unit)
{
        uint8_t raw[16];
        int w;

        if (gs_uuid_parse(uuid, raw) < 0 || unit >= GS_MAX_UNITS_PER_GPU)
                return -EINVAL;
        w = snprintf(buf, n, "%s-u%u", uuid, unit);
        if (w < 0 || (size_t)w >= n)
                return -ENOSPC;
        return 0;
}

int gs_devid_parse(const char *id, char *ret_uuid, uint32_t *ret_unit)
{
        uint8_t raw[16];
        char uuid[GS_UUID_STR_LEN + 1];
        const char *p;
        uint32_t unit = 0;

        if (!id || strlen(id) > GS_DEVID_MAX || strlen(id) < GS_UUID_STR_LEN + 3)
                return -EINVAL;
        memcpy(uuid, id, GS_UUID_STR_LEN);
        uuid[GS_UUID_STR_LEN] = '\0';
        if (gs_uuid_parse(uuid, raw) < 0)
                return -EINVAL;
        p = id + GS_UUID_STR_LEN;
        if (p[0] != '-' || p[1] != 'u' || p[2] < '0' || p[2] > '9')
                return -EINVAL;
        p += 2;
        if (p[0] == '0' && p[1] != '\0') /* one spelling per unit: no leading zeros */
                return -EINVAL;
        for (; *p; p++) {
                if (*p < '0' || *p > '9')
                        return -EINVAL;
                unit = unit * 10 + (uint32_t)(*p - '0');
                if (unit >= GS_MAX_UNITS_PER_GPU)
                        return -EINVAL;
        }
        memcpy(ret_uuid, uuid, sizeof(uuid));
        *ret_unit = unit;
        return 0;
}
