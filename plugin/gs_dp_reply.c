/* gs_dp_reply.c — a DevicePlugin method's reply and the arena its fields
 * live in, freed together (gs_dp.h); shared by the service's methods
 * (gs_dpsvc.c) and Allocate (gs_allocate.c). */
#include <stdlib.h>

#include "gs_dp.h"

struct gs_dp_reply *gs_dp_reply_new(void)
{
        return calloc(1, sizeof(struct gs_dp_reply));
}

void gs_dp_reply_free(void *ctx, ProtobufCMessage *m)
{
        struct gs_dp_reply *o = (struct gs_dp_reply *)m;

        (void)ctx;
        if (!o)
                return;
        gs_arena_free(&o->arena);
        free(o);
}
