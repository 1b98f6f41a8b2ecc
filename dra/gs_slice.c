/* gs_slice.c — see gs_slice.h. */
#include "gs_slice.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "gs_json.h"

#define REPLY_MAX (1u << 20)

int gs_slice_name(char *buf, size_t cap, const char *node, const char *driver)
{
        int n = snprintf(buf, cap, "%s-%s", node, driver);

        return n < 0 || (size_t)n >= cap || n > 253 ? -ENAMETOOLONG : 0;
}

int gs_slice_json(FILE *f, const char *driver, const char *node, uint64_t generation, const struct gs_slice_gpu *g,
                  size_t n, const char *driver_version)
{
        char name[300];

        if (gs_slice_name(name, sizeof(name), node, driver) < 0)
                return -ENAMETOOLONG;
        fprintf(f, "{\"apiVersion\":\"resource.k8s.io/v1\",\"kind\":\"ResourceSlice\",\"metadata\":{\"name\":");
        gs_json_write_str(f, name);
        fprintf(f, "},\"spec\":{\"driver\":");
        gs_json_write_str(f, driver);
        fprintf(f, ",\"nodeName\":");
        gs_json_write_str(f, node);
        fprintf(f, ",\"pool\":{\"name\":");
        gs_json_write_str(f, node);
        fprintf(f, ",\"generation\":%llu,\"resourceSliceCount\":1},\"devices\":[", (unsigned long long)generation);
        for (size_t i = 0; i < n; i++) {
                fprintf(f,
                        "%s{\"name\":\"gpu-%u\",\"allowMultipleAllocations\":true,\"attributes\":{\"uuid\":{\"string\":",
                        i ? "," : "", g[i].index);
                gs_json_write_str(f, g[i].uuid);
                fprintf(f, "},\"productName\":{\"string\":");
                gs_json_write_str(f, g[i].name);
                fprintf(f, "},\"index\":{\"int\":%u},\"memory\":{\"int\":%llu}", g[i].index,
                        (unsigned long long)g[i].total_bytes);
                if (g[i].numa_node >= 0)
                        fprintf(f, ",\"numaNode\":{\"int\":%d}", g[i].numa_node);
                if (driver_version[0]) {
                        fprintf(f, ",\"driverVersion\":{\"version\":");
                        gs_json_write_str(f, driver_version);
                        fputc('}', f);
                }
                fprintf(f,
                        "},\"capacity\":{\"memory\":{\"value\":\"%llu\",\"requestPolicy\":{\"default\":\"%llu\","
                        "\"validRange\":{\"min\":\"%llu\",\"step\":\"%llu\"}}},",
                        (unsigned long long)g[i].capacity_bytes, (unsigned long long)g[i].unit_bytes,
                        (unsigned long long)g[i].unit_bytes, (unsigned long long)g[i].unit_bytes);
                /* Compute: percent of the GPU's time (docs/compute.md); a
                 * claim that asks for none consumes none. */
                fprintf(f,
                        "\"compute\":{\"value\":\"%u\",\"requestPolicy\":{\"default\":\"0\","
                        "\"validRange\":{\"min\":\"0\",\"max\":\"%u\",\"step\":\"1\"}}}}}",
                        GS_SLICE_COMPUTE, GS_SLICE_COMPUTE);
        }
        fprintf(f, "]}}");
        return ferror(f) ? -EIO : 0;
}

int gs_slice_publish(const struct gs_kapi *k, const char *driver, const char *node, uint64_t generation,
                     const struct gs_slice_gpu *g, size_t n, const char *driver_version, char *err, size_t errlen)
{
        char name[300], path[600], *body = NULL, *reply = NULL;
        size_t blen = 0, rlen = 0;
        long code = 0;
        FILE *f;
        int r;

        if (gs_slice_name(name, sizeof(name), node, driver) < 0) {
                snprintf(err, errlen, "node name '%.64s' too long for a ResourceSlice name", node);
                return -ENAMETOOLONG;
        }
        f = open_memstream(&body, &blen);
        if (!f) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        r = gs_slice_json(f, driver, node, generation, g, n, driver_version);
        if (fclose(f) != 0 || r < 0) {
                free(body);
                snprintf(err, errlen, "out of memory building the ResourceSlice");
                return -ENOMEM;
        }
        snprintf(path, sizeof(path), "/apis/resource.k8s.io/v1/resourceslices/%s?fieldManager=%s&force=true", name,
                 "gshare-dra-plugin");
        r = gs_kapi_request(k, "PATCH", path, "application/apply-patch+yaml", body, REPLY_MAX, &code, &reply, &rlen,
                            err, errlen);
        free(body);
        if (r < 0)
                return r;
        if (code < 200 || code > 299) {
                char snip[200];
                size_t m = rlen < sizeof(snip) - 1 ? rlen : sizeof(snip) - 1;
                for (size_t i = 0; i < m; i++)
                        snip[i] = isprint((unsigned char)reply[i]) ? reply[i] : '?';
                snip[m] = '\0';
                snprintf(err, errlen, "ResourceSlice %s: HTTP %ld: %s", name, code, snip);
                r = code == 401 || code == 403 ? -EACCES : -EIO;
        }
        free(reply);
        return r;
}

int gs_slice_exists(const struct gs_kapi *k, const char *driver, const char *node, char *err, size_t errlen)
{
        char name[300], path[400], *reply = NULL;
        size_t rlen = 0;
        long code = 0;
        int r;

        if (gs_slice_name(name, sizeof(name), node, driver) < 0)
                return -ENAMETOOLONG;
        snprintf(path, sizeof(path), "/apis/resource.k8s.io/v1/resourceslices/%s", name);
        r = gs_kapi_request(k, "GET", path, NULL, NULL, REPLY_MAX, &code, &reply, &rlen, err, errlen);
        free(reply);
        if (r < 0)
                return r;
        if (code == 404)
                return 0;
        if (code != 200) {
                snprintf(err, errlen, "GET ResourceSlice %s: HTTP %ld", name, code);
                return code == 401 || code == 403 ? -EACCES : -EIO;
        }
        return 1;
}

void gs_slice_driver_version(const char *path, char *buf, size_t cap)
{
        char line[512], *p, *save = NULL;
        FILE *f = fopen(path, "re");
        unsigned long v[3] = { 0, 0, 0 };
        int nv = 0;

        buf[0] = '\0';
        if (!f)
                return;
        if (!fgets(line, sizeof(line), f)) {
                fclose(f);
                return;
        }
        fclose(f);
        /* The first word that is digits and dots with a dot. */
        for (p = strtok_r(line, " \t\n", &save); p; p = strtok_r(NULL, " \t\n", &save)) {
                if (strspn(p, "0123456789.") == strlen(p) && strchr(p, '.') && isdigit((unsigned char)p[0]))
                        break;
        }
        if (!p)
                return;
        for (char *s = p, *e; *s && nv < 3; s = *e ? e + 1 : e) {
                v[nv++] = strtoul(s, &e, 10);
                if (*e && *e != '.')
                        return;
        }
        /* semver: three numbers, no leading zeros ("535.104.05" -> 535.104.5). */
        snprintf(buf, cap, "%lu.%lu.%lu", v[0], v[1], v[2]);
}
