/* gs_claim.c — see gs_claim.h. */
#include "gs_claim.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

static yaml_node_t *get(yaml_document_t *d, yaml_node_t *map, const char *key)
{
        if (!map || map->type != YAML_MAPPING_NODE)
                return NULL;
        for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
                yaml_node_t *k = yaml_document_get_node(d, p->key);
                if (k && k->type == YAML_SCALAR_NODE && k->data.scalar.length == strlen(key) &&
                    memcmp(k->data.scalar.value, key, k->data.scalar.length) == 0)
                        return yaml_document_get_node(d, p->value);
        }
        return NULL;
}

/* The scalar n into out (cap bytes); "" when n is not a scalar.  -ENAMETOOLONG if it does not fit. */
static int scalar(yaml_node_t *n, char *out, size_t cap)
{
        out[0] = '\0';
        if (!n || n->type != YAML_SCALAR_NODE)
                return 0;
        if (n->data.scalar.length >= cap)
                return -ENAMETOOLONG;
        memcpy(out, n->data.scalar.value, n->data.scalar.length);
        out[n->data.scalar.length] = '\0';
        return 0;
}

int gs_claim_quantity(const char *s, uint64_t *ret)
{
        static const struct {
                const char *sfx;
                uint64_t mul;
        } sfx[] = { { "Ki", 1ull << 10 },      { "Mi", 1ull << 20 },
                    { "Gi", 1ull << 30 },      { "Ti", 1ull << 40 },
                    { "Pi", 1ull << 50 },      { "k", 1000ull },
                    { "M", 1000000ull },       { "G", 1000000000ull },
                    { "T", 1000000000000ull }, { "", 1 } };
        char *end;
        unsigned long long v;

        if (!s[0] || s[0] < '0' || s[0] > '9')
                return -EINVAL;
        errno = 0;
        v = strtoull(s, &end, 10);
        if (errno)
                return -ERANGE;
        if (end[0] == 'e' || end[0] == 'E') {
                /* 1e9: a plain exponent of ten. */
                char *e2;
                unsigned long x = strtoul(end + 1, &e2, 10);
                if (*e2 || end[1] < '0' || end[1] > '9' || x > 19)
                        return -EINVAL;
                for (; x; x--) {
                        if (v > UINT64_MAX / 10)
                                return -ERANGE;
                        v *= 10;
                }
                *ret = v;
                return 0;
        }
        for (size_t i = 0; i < sizeof(sfx) / sizeof(sfx[0]); i++)
                if (strcmp(end, sfx[i].sfx) == 0) {
                        if (v > UINT64_MAX / sfx[i].mul)
                                return -ERANGE;
                        *ret = v * sfx[i].mul;
                        return 0;
                }
        return -EINVAL;
}

static int result(yaml_document_t *d, yaml_node_t *n, struct gs_claim_result *r, char *err, size_t errlen)
{
        char mem[64], comp[64];
        uint64_t c = 0;

        memset(r, 0, sizeof(*r));
        if (scalar(get(d, n, "request"), r->request, sizeof(r->request)) < 0 ||
            scalar(get(d, n, "pool"), r->pool, sizeof(r->pool)) < 0 ||
            scalar(get(d, n, "device"), r->device, sizeof(r->device)) < 0 ||
            scalar(get(d, n, "shareID"), r->share_id, sizeof(r->share_id)) < 0 ||
            scalar(get(d, get(d, n, "consumedCapacity"), "memory"), mem, sizeof(mem)) < 0 ||
            scalar(get(d, get(d, n, "consumedCapacity"), "compute"), comp, sizeof(comp)) < 0) {
                snprintf(err, errlen, "an allocation result has an over-long field");
                return -EINVAL;
        }
        if (mem[0] && gs_claim_quantity(mem, &r->memory) < 0) {
                snprintf(err, errlen, "consumedCapacity.memory '%.40s' of device %.64s is not a quantity of bytes", mem,
                         r->device);
                return -EINVAL;
        }
        /* Percent of the GPU's time (the slice's capacity.compute). */
        if (comp[0] && (gs_claim_quantity(comp, &c) < 0 || c > 100)) {
                snprintf(err, errlen, "consumedCapacity.compute '%.40s' of device %.64s is not a percent (0 to 100)",
                         comp, r->device);
                return -EINVAL;
        }
        r->compute = (uint32_t)c;
        return 0;
}

/* Whether the config entry n applies to one of ret's results: its
 * requests list absent or empty, or naming one of their requests. */
static bool config_applies(yaml_document_t *d, yaml_node_t *n, const struct gs_claim_info *ret)
{
        yaml_node_t *reqs = get(d, n, "requests");

        if (!reqs || reqs->type != YAML_SEQUENCE_NODE ||
            reqs->data.sequence.items.start == reqs->data.sequence.items.top)
                return true;
        for (yaml_node_item_t *it = reqs->data.sequence.items.start; it < reqs->data.sequence.items.top; it++) {
                char name[64];
                if (scalar(yaml_document_get_node(d, *it), name, sizeof(name)) < 0)
                        continue;
                for (size_t i = 0; i < ret->nresults; i++)
                        if (strcmp(name, ret->results[i].request) == 0)
                                return true;
        }
        return false;
}

/* "1".."100" into *ret: 0, or -EINVAL. */
static int percent(const char *s, uint32_t *ret)
{
        char *end;
        long v;

        errno = 0;
        v = strtol(s, &end, 10);
        if (errno || end == s || *end || v < 1 || v > 100)
                return -EINVAL;
        *ret = (uint32_t)v;
        return 0;
}

/* computeClass, computeCap and computeWeight of one configuration n
 * (gs_claim_info). */
static int config_compute(yaml_document_t *d, yaml_node_t *n, yaml_node_t *params, const char *driver,
                          struct gs_claim_info *ret, char *err, size_t errlen)
{
        char cls[32], cap[16], weight[16], src[32];
        uint32_t v = 0, w = 0;

        if (scalar(get(d, params, "computeClass"), cls, sizeof(cls)) < 0 ||
            scalar(get(d, params, "computeCap"), cap, sizeof(cap)) < 0 ||
            scalar(get(d, params, "computeWeight"), weight, sizeof(weight)) < 0 ||
            scalar(get(d, n, "source"), src, sizeof(src)) < 0) {
                snprintf(err, errlen, "the configuration of %s: computeClass, computeCap or computeWeight is too long",
                         driver);
                return -EINVAL;
        }
        if (cls[0] && strcmp(cls, "latency-critical") && strcmp(cls, "standard") && strcmp(cls, "best-effort")) {
                snprintf(err, errlen,
                         "the configuration of %s: computeClass '%.31s' is not latency-critical, standard "
                         "or best-effort",
                         driver, cls);
                return -EINVAL;
        }
        if (strcmp(cls, "latency-critical") == 0 && strcmp(src, "FromClass") != 0) {
                snprintf(err, errlen,
                         "the configuration of %s: computeClass latency-critical comes only from the "
                         "DeviceClass (its administrator's), not from the claim",
                         driver);
                return -EINVAL;
        }
        if (cap[0] && percent(cap, &v) < 0) {
                snprintf(err, errlen, "the configuration of %s: computeCap '%.15s' is not a percent (1 to 100)", driver,
                         cap);
                return -EINVAL;
        }
        if (weight[0] && percent(weight, &w) < 0) {
                snprintf(err, errlen, "the configuration of %s: computeWeight '%.15s' is not a weight (1 to 100)",
                         driver, weight);
                return -EINVAL;
        }
        /* The claim's own can lower what the class gave, never raise it:
         * the lowest class, the smallest cap and weight win. */
        if (cls[0] && (!ret->compute_class[0] || strcmp(cls, "best-effort") == 0 ||
                       strcmp(ret->compute_class, "latency-critical") == 0))
                snprintf(ret->compute_class, sizeof(ret->compute_class), "%s", cls);
        if (v && (!ret->compute_cap || v < ret->compute_cap))
                ret->compute_cap = v;
        if (w && (!ret->compute_weight || w < ret->compute_weight))
                ret->compute_weight = w;
        return 0;
}

/* status.allocation.devices.config[]: the burst of our driver's opaque
 * parameters that apply to our results. */
static int config_burst(yaml_document_t *d, yaml_node_t *alloc, const char *driver, struct gs_claim_info *ret,
                        char *err, size_t errlen)
{
        yaml_node_t *cfgs = get(d, get(d, alloc, "devices"), "config");

        if (!cfgs || cfgs->type != YAML_SEQUENCE_NODE)
                return 0;
        for (yaml_node_item_t *it = cfgs->data.sequence.items.start; it < cfgs->data.sequence.items.top; it++) {
                yaml_node_t *n = yaml_document_get_node(d, *it), *opaque = get(d, n, "opaque"), *params;
                char drv[254], q[64];
                uint64_t b;

                if (scalar(get(d, opaque, "driver"), drv, sizeof(drv)) < 0 || strcmp(drv, driver) != 0 ||
                    !config_applies(d, n, ret))
                        continue;
                params = get(d, opaque, "parameters");
                if (!params || params->type != YAML_MAPPING_NODE) {
                        snprintf(err, errlen, "the configuration of %s has no parameters object", driver);
                        return -EINVAL;
                }
                for (yaml_node_pair_t *p = params->data.mapping.pairs.start; p < params->data.mapping.pairs.top; p++) {
                        char key[64];
                        if (scalar(yaml_document_get_node(d, p->key), key, sizeof(key)) < 0 ||
                            (strcmp(key, "burst") && strcmp(key, "apiVersion") && strcmp(key, "kind") &&
                             strcmp(key, "computeClass") && strcmp(key, "computeCap") &&
                             strcmp(key, "computeWeight"))) {
                                snprintf(err, errlen,
                                         "the configuration of %s has parameter '%.63s'; known: burst, "
                                         "computeClass, computeCap, computeWeight",
                                         driver, key);
                                return -EINVAL;
                        }
                }
                if (config_compute(d, n, params, driver, ret, err, errlen) < 0)
                        return -EINVAL;
                if (scalar(get(d, params, "burst"), q, sizeof(q)) < 0 || (q[0] && gs_claim_quantity(q, &b) < 0) ||
                    (q[0] && b == 0)) {
                        snprintf(err, errlen, "the configuration of %s: burst '%.40s' is not a quantity of bytes",
                                 driver, q);
                        return -EINVAL;
                }
                if (!q[0])
                        continue;
                if (ret->burst && ret->burst != b) {
                        snprintf(err, errlen, "the configurations of %s give two bursts: %llu and %llu bytes", driver,
                                 (unsigned long long)ret->burst, (unsigned long long)b);
                        return -EINVAL;
                }
                ret->burst = b;
        }
        return 0;
}

int gs_claim_parse(const char *json, size_t len, const char *driver, struct gs_claim_info *ret, char *err,
                   size_t errlen)
{
        yaml_parser_t p;
        yaml_document_t d;
        yaml_node_t *root, *alloc, *results;
        int r = 0;

        memset(ret, 0, sizeof(*ret));
        if (!yaml_parser_initialize(&p)) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        yaml_parser_set_input_string(&p, (const unsigned char *)json, len);
        if (!yaml_parser_load(&p, &d)) {
                snprintf(err, errlen, "the ResourceClaim is not JSON: %.100s", p.problem ? p.problem : "?");
                yaml_parser_delete(&p);
                return -EINVAL;
        }
        root = yaml_document_get_root_node(&d);
        if (!root || root->type != YAML_MAPPING_NODE) {
                snprintf(err, errlen, "the ResourceClaim is not a JSON object");
                r = -EINVAL;
                goto out;
        }
        if (scalar(get(&d, get(&d, root, "metadata"), "uid"), ret->uid, sizeof(ret->uid)) < 0) {
                snprintf(err, errlen, "the ResourceClaim's uid is too long");
                r = -EINVAL;
                goto out;
        }
        alloc = get(&d, get(&d, root, "status"), "allocation");
        ret->allocated = alloc && alloc->type == YAML_MAPPING_NODE;
        results = get(&d, get(&d, alloc, "devices"), "results");
        if (!results || results->type != YAML_SEQUENCE_NODE)
                goto out;
        for (yaml_node_item_t *it = results->data.sequence.items.start; it < results->data.sequence.items.top; it++) {
                yaml_node_t *n = yaml_document_get_node(&d, *it);
                char drv[254];

                if (scalar(get(&d, n, "driver"), drv, sizeof(drv)) < 0 || strcmp(drv, driver) != 0)
                        continue;
                if (ret->nresults == GS_CLAIM_MAX_RESULTS) {
                        snprintf(err, errlen, "the claim has more than %d results of %s", GS_CLAIM_MAX_RESULTS, driver);
                        r = -EINVAL;
                        goto out;
                }
                r = result(&d, n, &ret->results[ret->nresults], err, errlen);
                if (r < 0)
                        goto out;
                ret->nresults++;
        }
        if (ret->nresults)
                r = config_burst(&d, alloc, driver, ret, err, errlen);
out:
        yaml_document_delete(&d);
        yaml_parser_delete(&p);
        return r;
}

uint32_t gs_claim_compute_cap(const struct gs_claim_info *ci, const struct gs_claim_result *r)
{
        uint32_t consumed = r->compute < 100 ? r->compute : 0;

        if (consumed && (!ci->compute_cap || consumed < ci->compute_cap))
                return consumed;
        return ci->compute_cap;
}
