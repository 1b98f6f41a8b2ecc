/* gsharectl — inspects and drives gshare-agent over its control socket.
 *
 *   gsharectl [--socket PATH] [--json] gpus|allocations|processes|
 *             create ID...|release ID|watch
 *
 * Exit status: 0 on success, 1 if the agent answered with an error, 2 for
 * bad usage, 3 if the agent could not be reached. */
#include <getopt.h>
#include <inttypes.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gs_config.h"
#include "gs_ctl.h"

#define CALL_TIMEOUT_MS 10000 /* --timeout-ms: 1 ms .. 1 h */
#define CALL_TIMEOUT_MAX_MS 3600000

static int json;
static int call_timeout_ms = CALL_TIMEOUT_MS;

static void usage(FILE *f)
{
        fprintf(f,
                "usage: gsharectl [--socket PATH] [--json] [--timeout-ms MS] COMMAND\n"
                "commands:\n"
                "  gpus               GPUs, pools, units\n"
                "  allocations        allocations and their usage per GPU\n"
                "  processes          registered processes\n"
                "  create [--burst SIZE] [--compute-class C] [--compute-cap N] [--compute-weight W] ID...\n"
                "                     create (or find) the allocation of these device IDs; --burst:\n"
                "                     per GPU the most it may use, quota included (docs/burst.md);\n"
                "                     --compute-*: its compute class, cap and weight (docs/compute.md)\n"
                "  release ID         release an allocation by id\n"
                "  watch              print the GPU list on every change (Ctrl-C ends)\n"
                "  ready FILE         exit 0 if the agent's ready file (config readyFile) exists\n"
                "The socket defaults to $GSHARE_AGENT_SOCKET, else %s.\n",
                GS_CTL_DEFAULT_SOCKET);
}

static const char *sz(uint64_t b, char *buf, size_t n)
{
        if (b >= GS_GiB && b % (GS_GiB / 100 ? GS_GiB / 1024 : 1) == 0)
                snprintf(buf, n, "%.2f GiB", (double)b / (double)GS_GiB);
        else
                snprintf(buf, n, "%.1f MiB", (double)b / (double)GS_MiB);
        return buf;
}

/* A JSON string (the agent's strings are printable, but escape anyway). */
static void jstr(const char *s)
{
        putchar('"');
        for (; s && *s; s++) {
                unsigned char c = (unsigned char)*s;
                if (c == '"' || c == '\\')
                        printf("\\%c", c);
                else if (c < 0x20)
                        printf("\\u%04x", c);
                else
                        putchar(c);
        }
        putchar('"');
}

static void print_gpus(const Gshare__Ctl__V1__ListGpusReply *l)
{
        char a[32], b[32], c[32];

        if (json) {
                printf("{\"generation\":%" PRIu64 ",\"gpus\":[", l->generation);
                for (size_t i = 0; i < l->n_gpus; i++) {
                        const Gshare__Ctl__V1__Gpu *g = l->gpus[i];
                        printf("%s{\"index\":%u,\"uuid\":", i ? "," : "", g->index);
                        jstr(g->uuid);
                        printf(",\"name\":");
                        jstr(g->name);
                        printf(",\"pci_bus_id\":");
                        jstr(g->pci_bus_id);
                        printf(",\"numa_node\":%d,\"total_bytes\":%" PRIu64 ",\"reserve_bytes\":%" PRIu64
                               ",\"chunk_bytes\":%" PRIu64 ",\"chunks_total\":%u,\"chunks_free\":%u"
                               ",\"unit_bytes\":%" PRIu64 ",\"units_total\":%u,\"units_allocated\":%u"
                               ",\"units_lent\":%u,\"healthy\":%s,\"health_reason\":",
                               g->numa_node, g->total_bytes, g->reserve_bytes, g->chunk_bytes, g->chunks_total,
                               g->chunks_free, g->unit_bytes, g->units_total, g->units_allocated, g->units_lent,
                               g->healthy ? "true" : "false");
                        jstr(g->health_reason);
                        printf(",\"chunks_spilled\":%u,\"chunks_owed\":%u,\"chunks_moving\":%u"
                               ",\"chunks_moved_out\":%" PRIu64 ",\"chunks_moved_back\":%" PRIu64,
                               g->chunks_spilled, g->chunks_owed, g->chunks_moving, g->chunks_moved_out,
                               g->chunks_moved_back);
                        printf(",\"units_draining\":[");
                        for (size_t k = 0; k < g->n_units_draining; k++)
                                printf("%s%u", k ? "," : "", g->units_draining[k]);
                        printf("],\"units_restoring\":[");
                        for (size_t k = 0; k < g->n_units_restoring; k++)
                                printf("%s%u", k ? "," : "", g->units_restoring[k]);
                        printf("]}");
                }
                printf("]}\n");
                fflush(stdout);
                return;
        }
        printf("%-3s %-40s %-24s %-5s %-11s %-11s %-10s %-13s %-6s %-7s %s\n", "IDX", "UUID", "NAME", "NUMA", "TOTAL",
               "POOL", "CHUNK", "CHUNKS FREE", "UNITS", "ALLOC'D", "HEALTH");
        for (size_t i = 0; i < l->n_gpus; i++) {
                const Gshare__Ctl__V1__Gpu *g = l->gpus[i];
                char fr[24], un[16], al[24];
                snprintf(fr, sizeof(fr), "%u/%u", g->chunks_free, g->chunks_total);
                snprintf(un, sizeof(un), "%u", g->units_total);
                snprintf(al, sizeof(al), "%u+%u lent", g->units_allocated, g->units_lent);
                printf("%-3u %-40s %-24.24s %-5d %-11s %-11s %-10s %-13s %-6s %-7s %s%s%s\n", g->index, g->uuid,
                       g->name, g->numa_node, sz(g->total_bytes, a, sizeof(a)),
                       sz((uint64_t)g->chunks_total * g->chunk_bytes, b, sizeof(b)), sz(g->chunk_bytes, c, sizeof(c)),
                       fr, un, al, g->healthy ? "ok" : "UNHEALTHY", g->healthy ? "" : ": ", g->health_reason);
        }
        fflush(stdout);
}

static void print_alloc_json(const Gshare__Ctl__V1__Allocation *al)
{
        printf("{\"id\":");
        jstr(al->id);
        printf(",\"socket_dir\":");
        jstr(al->socket_dir);
        printf(",\"pod_namespace\":");
        jstr(al->pod_namespace);
        printf(",\"pod_name\":");
        jstr(al->pod_name);
        printf(",\"container_name\":");
        jstr(al->container_name);
        printf(",\"claim_uid\":");
        jstr(al->claim_uid);
        printf(",\"claim\":");
        jstr(al->claim_name);
        printf(",\"claim_namespace\":");
        jstr(al->claim_namespace);
        printf(",\"compute_class\":");
        jstr(al->compute_class);
        printf(",\"compute_cap\":%u,\"compute_weight\":%u", al->compute_cap, al->compute_weight);
        printf(",\"compute_held_launches\":%" PRIu64 ",\"compute_held_seconds\":%.9f,\"compute_gpu_seconds\":%.9f",
               al->compute_held_launches, (double)al->compute_held_ns / 1e9, (double)al->compute_gpu_ns / 1e9);
        printf(",\"created_unix\":%" PRIu64 ",\"device_ids\":[", al->created_unix);
        for (size_t j = 0; j < al->n_device_ids; j++) {
                if (j)
                        putchar(',');
                jstr(al->device_ids[j]);
        }
        printf("],\"parts\":[");
        for (size_t j = 0; j < al->n_parts; j++) {
                const Gshare__Ctl__V1__AllocationPart *p = al->parts[j];
                printf("%s{\"gpu_index\":%u,\"gpu_uuid\":", j ? "," : "", p->gpu_index);
                jstr(p->gpu_uuid);
                printf(",\"units\":%u,\"quota_bytes\":%" PRIu64 ",\"bytes_requested\":%" PRIu64
                       ",\"bytes_in_chunks\":%" PRIu64 ",\"chunks_quota\":%u,\"chunks_free\":%u"
                       ",\"chunks_borrowed\":%u,\"outside_bytes\":%" PRIu64 ",\"used_bytes\":%" PRIu64
                       ",\"burst_bytes\":%" PRIu64 ",\"chunks_spilled\":%u,\"chunks_owed\":%u}",
                       p->units, p->quota_bytes, p->bytes_requested, p->bytes_in_chunks, p->chunks_quota,
                       p->chunks_free, p->chunks_borrowed, p->outside_bytes, p->used_bytes, p->burst_bytes,
                       p->chunks_spilled, p->chunks_owed);
        }
        printf("],\"processes\":[");
        for (size_t j = 0; j < al->n_processes; j++) {
                const Gshare__Ctl__V1__Process *p = al->processes[j];
                printf("%s{\"id\":%" PRIu64 ",\"pid\":%d,\"comm\":", j ? "," : "", p->id, p->pid);
                jstr(p->comm);
                printf(",\"gpu_index\":%u,\"bytes_requested\":%" PRIu64 ",\"bytes_in_blocks\":%" PRIu64
                       ",\"chunks_held\":%u,\"outside_bytes\":%" PRIu64 ",\"compute_duty_percent\":%u}",
                       p->gpu_index, p->bytes_requested, p->bytes_in_blocks, p->chunks_held, p->outside_bytes,
                       p->compute_duty_percent);
        }
        printf("]}");
}

static void print_allocs(Gshare__Ctl__V1__Allocation *const *v, size_t n)
{
        char a[32], b[32], c[32], d[32], e[32];

        if (json) {
                printf("[");
                for (size_t i = 0; i < n; i++) {
                        if (i)
                                putchar(',');
                        print_alloc_json(v[i]);
                }
                printf("]\n");
                return;
        }
        printf("%-16s %-4s %-6s %-12s %-12s %-12s %-12s %-12s %-6s %-6s %-6s %-5s %-16s %-9s %-40s %s\n", "ID", "GPU",
               "UNITS", "QUOTA", "BURST", "REQUESTED", "IN CHUNKS", "OUTSIDE", "BORROW", "SPILL", "OWED", "PROCS",
               "COMPUTE", "GPU TIME", "SOCKET DIR", "POD/CONTAINER OR CLAIM");
        for (size_t i = 0; i < n; i++) {
                const Gshare__Ctl__V1__Allocation *al = v[i];
                for (size_t j = 0; j < al->n_parts; j++) {
                        const Gshare__Ctl__V1__AllocationPart *p = al->parts[j];
                        size_t np = 0;
                        for (size_t k = 0; k < al->n_processes; k++)
                                np += al->processes[k]->gpu_index == p->gpu_index;
                        char who[600];
                        if (al->pod_name[0])
                                snprintf(who, sizeof(who), "%s/%s/%s", al->pod_namespace, al->pod_name,
                                         al->container_name);
                        else if (al->claim_name[0]) /* a DRA claim's (docs/dra.md) */
                                snprintf(who, sizeof(who), "claim %s/%s", al->claim_namespace, al->claim_name);
                        else
                                snprintf(who, sizeof(who), "-");
                        char cls[64], capw[32] = "";
                        /* The cap and a weight other than the default
                         * (an older agent's 0 is none). */
                        if (al->compute_cap)
                                snprintf(capw, sizeof(capw), ",cap=%u%%", al->compute_cap);
                        if (al->compute_weight && al->compute_weight != 10)
                                snprintf(capw + strlen(capw), sizeof(capw) - strlen(capw), ",weight=%u",
                                         al->compute_weight);
                        snprintf(cls, sizeof(cls), "%s%s", al->compute_class[0] ? al->compute_class : "-", capw);
                        /* The GPU time its compute QoS timed (docs/compute.md). */
                        char gpu[32] = "-";
                        if (al->compute_gpu_ns)
                                snprintf(gpu, sizeof(gpu), "%.1fs", (double)al->compute_gpu_ns / 1e9);
                        printf("%-16s %-4u %-6u %-12s %-12s %-12s %-12s %-12s %-6u %-6u %-6u %-5zu %-16s %-9s %-40s %s\n",
                               al->id, p->gpu_index, p->units, sz(p->quota_bytes, a, sizeof(a)),
                               p->burst_bytes > p->quota_bytes ? sz(p->burst_bytes, e, sizeof(e)) : "-",
                               sz(p->bytes_requested, b, sizeof(b)), sz(p->bytes_in_chunks, c, sizeof(c)),
                               sz(p->outside_bytes, d, sizeof(d)), p->chunks_borrowed, p->chunks_spilled,
                               p->chunks_owed, np, cls, gpu, al->socket_dir, who);
                }
        }
}

static void print_procs(Gshare__Ctl__V1__Allocation *const *v, size_t n)
{
        char a[32], b[32], c[32];

        if (json) {
                print_allocs(v, n);
                return;
        }
        printf("%-16s %-8s %-16s %-4s %-8s %-12s %-12s %-12s %-6s %s\n", "ALLOCATION", "PID", "COMM", "GPU", "PROC ID",
               "REQUESTED", "IN BLOCKS", "OUTSIDE", "CHUNKS", "DUTY");
        for (size_t i = 0; i < n; i++)
                for (size_t k = 0; k < v[i]->n_processes; k++) {
                        const Gshare__Ctl__V1__Process *p = v[i]->processes[k];
                        /* Its weight's duty (docs/compute.md "Weights"). */
                        char duty[16] = "-";
                        if (p->compute_duty_percent)
                                snprintf(duty, sizeof(duty), "%u%%", p->compute_duty_percent);
                        printf("%-16s %-8d %-16s %-4u %-8" PRIu64 " %-12s %-12s %-12s %-6u %s\n", v[i]->id, p->pid,
                               p->comm, p->gpu_index, p->id, sz(p->bytes_requested, a, sizeof(a)),
                               sz(p->bytes_in_blocks, b, sizeof(b)), sz(p->outside_bytes, c, sizeof(c)), p->chunks_held,
                               duty);
                }
}

static int unreachable(const char *path, int r)
{
        fprintf(stderr, "gsharectl: cannot reach the agent at %s: %s%s\n", path, strerror(-r),
                r == -ENOENT || r == -ECONNREFUSED ? " (is gshare-agent running? --socket PATH)"
                : r == -EACCES                     ? " (run as root)"
                                                   : "");
        return 3;
}

static int watch(const char *path)
{
        GsCtlRequest req = GSHARE__CTL__V1__REQUEST__INIT;
        Gshare__Ctl__V1__WatchRequest w = GSHARE__CTL__V1__WATCH_REQUEST__INIT;
        int fd, r;

        req.op_case = GSHARE__CTL__V1__REQUEST__OP_WATCH;
        req.watch = &w;
        fd = gs_ctl_connect(path);
        if (fd < 0)
                return unreachable(path, fd);
        r = gs_ctl_send(fd, &req.base, call_timeout_ms);
        while (r == 0) {
                GsCtlReply *rep = NULL;
                r = gs_ctl_recv_reply(fd, -1, &rep);
                if (r < 0)
                        break;
                if (rep->error) {
                        fprintf(stderr, "gsharectl: agent: %s\n", rep->message);
                        gs_ctl_reply_free(rep);
                        close(fd);
                        return 1;
                }
                if (rep->body_case == GSHARE__CTL__V1__REPLY__BODY_LIST_GPUS) {
                        if (!json)
                                printf("-- generation %" PRIu64 "\n", rep->list_gpus->generation);
                        print_gpus(rep->list_gpus);
                }
                gs_ctl_reply_free(rep);
        }
        close(fd);
        fprintf(stderr, "gsharectl: watch ended: %s\n", strerror(-r));
        return r == -ECONNRESET ? 0 : 3;
}

/* create's options (--burst, --compute-class, --compute-cap,
 * --compute-weight) into cr, from argv[optind]; optind left at the first
 * device ID.  -1 (said why) on a bad one. */
static int create_options(int argc, char **argv, Gshare__Ctl__V1__CreateAllocationRequest *cr)
{
        while (optind + 1 < argc && strncmp(argv[optind], "--", 2) == 0) {
                const char *opt = argv[optind], *v = argv[optind + 1];
                char *end = NULL;
                unsigned long cap;
                if (strcmp(opt, "--burst") == 0) {
                        if (gs_parse_size(v, &cr->burst_bytes) < 0 || !cr->burst_bytes) {
                                fprintf(stderr,
                                        "gsharectl: create: --burst needs a size (e.g. 40Gi), "
                                        "not '%s'\n",
                                        v);
                                return -1;
                        }
                } else if (strcmp(opt, "--compute-class") == 0) {
                        cr->compute_class = (char *)v;
                } else if (strcmp(opt, "--compute-cap") == 0 || strcmp(opt, "--compute-weight") == 0) {
                        bool is_cap = strcmp(opt, "--compute-cap") == 0;
                        errno = 0;
                        cap = strtoul(v, &end, 10);
                        if (errno || end == v || *end || cap < 1 || cap > 100) {
                                fprintf(stderr, "gsharectl: create: %s needs a %s, 1 to 100, not '%s'\n", opt,
                                        is_cap ? "percent" : "weight", v);
                                return -1;
                        }
                        if (is_cap)
                                cr->compute_cap = (uint32_t)cap;
                        else
                                cr->compute_weight = (uint32_t)cap;
                } else {
                        fprintf(stderr,
                                "gsharectl: create: unknown option %s: --burst SIZE (e.g. 40Gi), "
                                "--compute-class CLASS, --compute-cap 1..100, --compute-weight 1..100, then "
                                "device IDs\n",
                                opt);
                        return -1;
                }
                optind += 2;
        }
        return 0;
}

int main(int argc, char **argv)
{
        static const struct option opts[] = { { "socket", required_argument, NULL, 's' },
                                              { "json", no_argument, NULL, 'j' },
                                              { "timeout-ms", required_argument, NULL, 't' },
                                              { "help", no_argument, NULL, 'h' },
                                              { 0 } };
        GsCtlRequest req = GSHARE__CTL__V1__REQUEST__INIT;
        Gshare__Ctl__V1__CreateAllocationRequest cr = GSHARE__CTL__V1__CREATE_ALLOCATION_REQUEST__INIT;
        Gshare__Ctl__V1__DeviceOwner owner = GSHARE__CTL__V1__DEVICE_OWNER__INIT;
        Gshare__Ctl__V1__ReleaseAllocationRequest rr = GSHARE__CTL__V1__RELEASE_ALLOCATION_REQUEST__INIT;
        Gshare__Ctl__V1__ListGpusRequest lg = GSHARE__CTL__V1__LIST_GPUS_REQUEST__INIT;
        Gshare__Ctl__V1__ListAllocationsRequest la = GSHARE__CTL__V1__LIST_ALLOCATIONS_REQUEST__INIT;
        const char *path = getenv("GSHARE_AGENT_SOCKET"), *cmd;
        GsCtlReply *rep = NULL;
        int o, r, rc = 0;

        if (!path || !*path)
                path = GS_CTL_DEFAULT_SOCKET;
        while ((o = getopt_long(argc, argv, "+s:jt:h", opts, NULL)) != -1) {
                switch (o) {
                case 's': path = optarg; break;
                case 'j': json = 1; break;
                case 't': {
                        char *end;
                        long v;
                        errno = 0;
                        v = strtol(optarg, &end, 10);
                        if (errno || *end || end == optarg || v < 1 || v > CALL_TIMEOUT_MAX_MS) {
                                fprintf(stderr, "gsharectl: --timeout-ms: expected 1..%d milliseconds, got '%s'\n",
                                        CALL_TIMEOUT_MAX_MS, optarg);
                                return 2;
                        }
                        call_timeout_ms = (int)v;
                        break;
                }
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return 2;
                }
        }
        if (optind >= argc) {
                usage(stderr);
                return 2;
        }
        cmd = argv[optind++];
        if (strcmp(cmd, "watch") == 0)
                return watch(path);
        if (strcmp(cmd, "ready") == 0 && optind + 1 == argc) {
                /* The readiness probe: this pod's own agent, not whichever
                 * agent answers on the node's shared socket path. */
                struct stat st;
                if (stat(argv[optind], &st) == 0 && S_ISREG(st.st_mode))
                        return 0;
                fprintf(stderr, "gsharectl: not ready: %s: %s\n", argv[optind], strerror(errno));
                return 1;
        }
        if (strcmp(cmd, "gpus") == 0) {
                req.op_case = GSHARE__CTL__V1__REQUEST__OP_LIST_GPUS;
                req.list_gpus = &lg;
        } else if (strcmp(cmd, "allocations") == 0 || strcmp(cmd, "processes") == 0) {
                req.op_case = GSHARE__CTL__V1__REQUEST__OP_LIST_ALLOCATIONS;
                req.list_allocations = &la;
        } else if (strcmp(cmd, "create") == 0 && optind < argc) {
                req.op_case = GSHARE__CTL__V1__REQUEST__OP_CREATE_ALLOCATION;
                if (create_options(argc, argv, &cr) < 0)
                        return 2;
                if (optind >= argc) {
                        fprintf(stderr, "gsharectl: create: no device IDs\n");
                        return 2;
                }
                /* The device plugin's owner (CreateAllocation, owner devices). */
                owner.device_ids = argv + optind;
                owner.n_device_ids = (size_t)(argc - optind);
                cr.owner_case = GSHARE__CTL__V1__CREATE_ALLOCATION_REQUEST__OWNER_DEVICES;
                cr.devices = &owner;
                req.create_allocation = &cr;
                optind = argc;
        } else if (strcmp(cmd, "release") == 0 && optind + 1 == argc) {
                req.op_case = GSHARE__CTL__V1__REQUEST__OP_RELEASE_ALLOCATION;
                rr.id = argv[optind++];
                req.release_allocation = &rr;
        } else {
                usage(stderr);
                return 2;
        }
        if (optind < argc) {
                usage(stderr);
                return 2;
        }
        r = gs_ctl_call(path, &req, call_timeout_ms, &rep);
        if (r < 0)
                return unreachable(path, r);
        if (rep->error) {
                fprintf(stderr, "gsharectl: %s: %s (%s)\n", cmd, rep->message, strerror(-rep->error));
                gs_ctl_reply_free(rep);
                return 1;
        }
        switch (rep->body_case) {
        case GSHARE__CTL__V1__REPLY__BODY_LIST_GPUS: print_gpus(rep->list_gpus); break;
        case GSHARE__CTL__V1__REPLY__BODY_LIST_ALLOCATIONS:
                if (strcmp(cmd, "processes") == 0)
                        print_procs(rep->list_allocations->allocations, rep->list_allocations->n_allocations);
                else
                        print_allocs(rep->list_allocations->allocations, rep->list_allocations->n_allocations);
                break;
        case GSHARE__CTL__V1__REPLY__BODY_CREATE_ALLOCATION: {
                const Gshare__Ctl__V1__Allocation *al = rep->create_allocation->allocation;
                if (json) {
                        printf("{\"created\":%s,\"allocation\":", rep->create_allocation->created ? "true" : "false");
                        if (al)
                                print_alloc_json(al);
                        else
                                printf("null");
                        printf("}\n");
                } else if (al) {
                        printf("%s %s\nsocket %s/agent.sock\n", al->id,
                               rep->create_allocation->created ? "created" : "exists", al->socket_dir);
                }
                break;
        }
        case GSHARE__CTL__V1__REPLY__BODY_RELEASE_ALLOCATION:
                if (!json)
                        printf("released %s\n", rr.id);
                break;
        default: fprintf(stderr, "gsharectl: the agent's reply has no body\n"); rc = 1;
        }
        gs_ctl_reply_free(rep);
        return rc;
}
